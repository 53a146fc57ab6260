//! `lazaret run -p` and the profile's `ports`: which ports the Domain
//! publishes, checked before anything starts.

use crate::error::CliError;
use lazaret_config::PortSpec;
use lazaret_protocol::plan::PublishedPort;

/// The profile's `ports` (already validated at load) followed by the
/// `-p/--publish` options, each checked; the same port given twice counts
/// once, two that bind one host port are refused. With
/// `network.mode = "none"` there is no network to publish through.
pub fn published(
    profile: &lazaret_config::Profile,
    publish: &[String],
) -> Result<Vec<PublishedPort>, CliError> {
    let mut all: Vec<PortSpec> = lazaret_config::parse_ports(&profile.ports)
        .map_err(|(i, e)| CliError::Usage(format!("profile ports[{i}]: {e}")))?;
    for spec in publish {
        let p = lazaret_config::parse_port(spec).map_err(|e| {
            CliError::Usage(format!(
                "-p/--publish {}: {e}",
                lazaret_protocol::display::message(spec)
            ))
        })?;
        if all.contains(&p) {
            continue;
        }
        if let Some(q) = all.iter().find(|q| lazaret_config::clashes(q, &p)) {
            return Err(CliError::Usage(format!(
                "-p/--publish {p}: host port {} is already published as {q}",
                p.host_port
            )));
        }
        if all.len() == lazaret_config::MAX_PORTS {
            return Err(CliError::Usage(format!(
                "-p/--publish {p}: more than {} published ports",
                lazaret_config::MAX_PORTS
            )));
        }
        all.push(p);
    }
    if !all.is_empty() && profile.network.mode == Some(lazaret_config::NetworkMode::None) {
        return Err(CliError::Usage(format!(
            "-p/--publish {}: the profile's network.mode = \"none\" gives the sandbox no network to publish a port through; use a profile with a network",
            all[0]
        )));
    }
    Ok(all
        .into_iter()
        .map(|p| PublishedPort {
            host_addr: p.host_addr,
            host_port: p.host_port,
            sandbox_port: p.sandbox_port,
        })
        .collect())
}

/// One line per port bound beyond the host's loopback.
pub fn notices(ports: &[PublishedPort]) -> Vec<String> {
    ports
        .iter()
        .filter(|p| !p.host_addr.is_loopback())
        .map(|p| {
            format!(
                "lazaret: warning: published port {p} is bound on {}, not the loopback: it is reachable from the network, not only from this host",
                p.host_addr
            )
        })
        .collect()
}

/// Before a Domain starts: each host side can be bound now, or the start
/// is refused naming it (the supervisor binds them again, for good; this
/// only says it early, before anything is prepared or started).
pub fn check_free(ports: &[PublishedPort]) -> Result<(), CliError> {
    for p in ports {
        if let Err(e) = std::net::TcpListener::bind((p.host_addr, p.host_port)) {
            return Err(CliError::Start(taken(p, &e)));
        }
    }
    Ok(())
}

/// The message for a host side that cannot be bound.
pub fn taken(p: &PublishedPort, e: &std::io::Error) -> String {
    let why = match e.kind() {
        std::io::ErrorKind::AddrInUse => "it is in use on the host".to_string(),
        std::io::ErrorKind::AddrNotAvailable => "the host has no such address".to_string(),
        std::io::ErrorKind::PermissionDenied => {
            "binding it needs privileges (a port below 1024)".to_string()
        }
        _ => e.to_string(),
    };
    format!(
        "cannot publish port {p}: host port {}:{} cannot be bound ({why}); choose another host port with -p HOST_PORT:{}",
        p.host_addr, p.host_port, p.sandbox_port
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(ports: &[&str], none: bool) -> lazaret_config::Profile {
        let mut p = lazaret_config::Profile {
            ports: ports.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        if none {
            p.network.mode = Some(lazaret_config::NetworkMode::None);
        }
        p
    }

    #[test]
    fn options_and_profile_ports_are_merged_and_checked() {
        let got = published(
            &profile(&["8080:80"], false),
            &["8080:80".into(), "0.0.0.0:9090:90".into()],
        )
        .unwrap();
        let shown: Vec<String> = got.iter().map(|p| p.to_string()).collect();
        assert_eq!(shown, ["127.0.0.1:8080->80", "0.0.0.0:9090->90"]);
        assert_eq!(notices(&got).len(), 1);
        for (given, says) in [
            ("0:80", "-p/--publish 0:80:"),
            ("70000:80", "-p/--publish 70000:80:"),
            ("garbage", "-p/--publish garbage:"),
            ("8080:81", "already published as 127.0.0.1:8080:80"),
        ] {
            let e = published(&profile(&["8080:80"], false), &[given.into()]).unwrap_err();
            assert!(matches!(e, CliError::Usage(_)));
            assert!(e.to_string().contains(says), "{e}");
        }
        let e = published(&profile(&[], true), &["8080:80".into()]).unwrap_err();
        assert!(e.to_string().contains("network.mode = \"none\""), "{e}");
        assert!(published(&profile(&[], true), &[]).unwrap().is_empty());
    }

    #[test]
    fn a_taken_host_port_is_named() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let p = PublishedPort {
            host_addr: std::net::Ipv4Addr::LOCALHOST,
            host_port: port,
            sandbox_port: 80,
        };
        let e = check_free(&[p]).unwrap_err().to_string();
        assert!(
            e.contains(&format!("127.0.0.1:{port}")) && e.contains("in use"),
            "{e}"
        );
        drop(l);
        check_free(&[p]).unwrap();
    }
}
