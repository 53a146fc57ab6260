//! The variables one Client Session's processes get from the developer
//! (`lazaret run -e`, the profile's `pass_env`).

use crate::error::CliError;
use lazaret_protocol::session::SessionEnv;

/// The session's variables: the profile's `pass_env` names that are set
/// here, then each `-e KEY` (from this environment; unset is an error) or
/// `-e KEY=VALUE`, a later one replacing an earlier one of the same name.
pub fn session_env(
    pass_env: &[String],
    given: &[String],
    lookup: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<SessionEnv, CliError> {
    let bad = |what: String| CliError::Usage(format!("-e {what}"));
    let value = |k: &str| -> Result<Option<String>, CliError> {
        match lookup(k) {
            None => Ok(None),
            Some(v) => v
                .into_string()
                .map(Some)
                .map_err(|_| bad(format!("{k}: its value in this environment is not UTF-8"))),
        }
    };
    let mut vars: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: String| {
        vars.retain(|(n, _)| n != k);
        vars.push((k.to_string(), v));
    };
    for k in pass_env {
        if let Some(v) = value(k)? {
            set(k, v);
        }
    }
    for g in given {
        let (k, v) = match g.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (g.as_str(), None),
        };
        lazaret_config::env_name(k).map_err(|e| bad(format!("{k:?}: {e}")))?;
        if k.starts_with("LAZARET_") {
            return Err(bad(format!("{k}: LAZARET_ variables are Lazaret's own")));
        }
        let v = match v {
            Some(v) => v,
            None => value(k)?.ok_or_else(|| {
                bad(format!(
                    "{k}: not set in this environment (give -e {k}=VALUE, or export it)"
                ))
            })?,
        };
        if v.contains('\0') {
            return Err(bad(format!("{k}: the value contains a NUL byte")));
        }
        set(k, v);
    }
    let bytes: usize = vars.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    if vars.len() > SessionEnv::MAX_VARS || bytes > SessionEnv::MAX_BYTES {
        return Err(bad(format!(
            "and pass_env: {} variables, {bytes} bytes: at most {} variables and {} bytes",
            vars.len(),
            SessionEnv::MAX_VARS,
            SessionEnv::MAX_BYTES
        )));
    }
    Ok(SessionEnv(vars))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn host(k: &str) -> Option<OsString> {
        match k {
            "API_KEY" => Some("secret".into()),
            "OTHER" => Some("o".into()),
            _ => None,
        }
    }

    fn names_values(e: &SessionEnv) -> Vec<(String, String)> {
        e.0.clone()
    }

    #[test]
    fn pass_env_takes_what_is_set_and_e_overrides() {
        let e = session_env(
            &["API_KEY".into(), "UNSET".into()],
            &["OTHER".into(), "API_KEY=given".into(), "X=a=b".into()],
            &host,
        )
        .unwrap();
        assert_eq!(
            names_values(&e),
            vec![
                ("OTHER".into(), "o".into()),
                ("API_KEY".into(), "given".into()),
                ("X".into(), "a=b".into())
            ]
        );
    }

    #[test]
    fn an_unset_e_name_and_bad_names_are_errors() {
        let err = session_env(&[], &["NOPE".into()], &host)
            .unwrap_err()
            .to_string();
        assert!(err.contains("NOPE: not set"), "{err}");
        assert!(session_env(&[], &["1X=a".into()], &host).is_err());
        assert!(session_env(&[], &["=a".into()], &host).is_err());
        assert!(session_env(&[], &["LAZARET_SESSION_ID=x".into()], &host).is_err());
    }

    #[test]
    fn debug_shows_names_only() {
        let e = session_env(&["API_KEY".into()], &[], &host).unwrap();
        let shown = format!("{e:?}");
        assert!(
            shown.contains("API_KEY") && !shown.contains("secret"),
            "{shown}"
        );
    }

    #[test]
    fn bounded() {
        let many: Vec<String> = (0..=SessionEnv::MAX_VARS)
            .map(|i| format!("V{i}=x"))
            .collect();
        assert!(session_env(&[], &many, &host).is_err());
        let big = format!("B={}", "x".repeat(SessionEnv::MAX_BYTES));
        assert!(session_env(&[], &[big], &host).is_err());
    }
}
