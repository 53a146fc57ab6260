//! What an agent needs from the host (issue 14): the host's CA bundle
//! trusted inside (`trust_host_ca`).

use lazaret_tests::{assert_domain_gone, require_env, text};

/// A TLS server inside the sandbox with a certificate of a CA only the
/// host knows: Python's and curl's clients trust it only with
/// `trust_host_ca`.
#[test]
fn the_host_ca_bundle_is_trusted_inside_when_the_profile_says_so() {
    let env = require_env!();
    let ws = env.workspace("hostca");
    let ca = ws.base.join("ca");
    let out = env.sh(&format!(
        "set -e; mkdir -p '{ca}'; cd '{ca}'
         openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj '/CN=Lazaret Test CA' 2>/dev/null
         openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj '/CN=localhost' 2>/dev/null
         printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ext
         openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 -extfile ext 2>/dev/null
         cp srv.pem srv.key '{ws}/'",
        ca = ca.display(),
        ws = ws.path.display()
    ));
    assert!(out.status.success(), "openssl: {}", text(&out.stderr));
    let script = r#"
python3 - <<'PY' &
import http.server, ssl
srv = http.server.HTTPServer(("127.0.0.1", 8443), http.server.SimpleHTTPRequestHandler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("srv.pem", "srv.key")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
PY
for i in $(seq 50); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8443))' 2>/dev/null && break; sleep 0.1; done
python3 -c 'import urllib.request; print(urllib.request.urlopen("https://127.0.0.1:8443/README").read().decode().strip())' 2>/dev/null || echo python-refused
curl -sS https://127.0.0.1:8443/README 2>/dev/null || echo curl-refused
echo "ssl=$SSL_CERT_FILE"
echo x >> /.lazaret/host-ca.pem 2>/dev/null && echo writable || echo read-only
"#;

    // Without the key: the host CA means nothing inside.
    let out = ws.run_sh(script);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "python-refused\ncurl-refused\nssl=\nread-only\n",
        "{}",
        text(&out.stderr)
    );
    assert_domain_gone(&ws.domain_id("default"));

    ws.write_config(&format!(
        "[profiles.default]\ntrust_host_ca = true\nhost_ca_file = \"{}\"\n",
        ca.join("ca.pem").display()
    ));
    let out = ws.run_sh(script);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "hello\nhello\nssl=/.lazaret/host-ca.pem\nread-only\n",
        "{}",
        text(&out.stderr)
    );
    assert_domain_gone(&ws.domain_id("default"));

    // A file that is no PEM bundle is refused before anything starts.
    let bogus = ws.base.join("bogus.pem");
    std::fs::write(&bogus, b"not a certificate\n").unwrap();
    let _ = env.sh(&format!("chmod a+r '{}'", bogus.display()));
    ws.write_config(&format!(
        "[profiles.default]\ntrust_host_ca = true\nhost_ca_file = \"{}\"\n",
        bogus.display()
    ));
    let out = ws.run_sh("true");
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("holds no PEM certificate"),
        "{}",
        text(&out.stderr)
    );
}

/// `lazaret run -e` and `pass_env`: the values reach the session's
/// processes only; no file under the Domain Root and no host process's
/// command line or environment holds them, even while the session runs.
#[test]
fn session_variables_reach_the_sandbox_and_nothing_on_the_host() {
    let env = require_env!();
    let ws = env.workspace("sessenv");
    let secret = format!("sk-lazaret-{}", std::process::id());
    ws.write_config("[profiles.default]\npass_env = [\"API_KEY\", \"NOT_SET_HERE\"]\n");
    let child = ws
        .lazaret(&[
            "run",
            "-e",
            "OTHER=given",
            "--",
            "sh",
            "-c",
            "echo \"$API_KEY $OTHER ${NOT_SET_HERE-unset}\"; sleep 4",
        ])
        .env("API_KEY", &secret)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // While the session runs: nothing on the host holds the value but the
    // CLI's own environment (where the developer put it).
    std::thread::sleep(std::time::Duration::from_secs(2));
    let cli = child.id() as i32;
    let out = env.sh(&format!(
        "grep -rl -- '{secret}' '{}' 2>/dev/null || true",
        ws.domain_root("default").display()
    ));
    assert_eq!(
        text(&out.stdout),
        "",
        "files under the Domain Root hold the value"
    );
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&cmdline).contains(&secret),
            "process {pid}'s command line holds the value"
        );
        // setpriv, then lazaret: the CLI and its launcher hold it.
        if pid == cli
            || std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "lazaret")
        {
            continue;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&environ).contains(&secret),
            "process {pid} ({}) has the value in its environment",
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .unwrap_or_default()
                .trim()
        );
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{secret} given unset\n"));
    assert_domain_gone(&ws.domain_id("default"));
    let out = env.sh(&format!(
        "grep -rl -- '{secret}' '{}' 2>/dev/null || true",
        ws.domain_root("default").display()
    ));
    assert_eq!(
        text(&out.stdout),
        "",
        "files under the Domain Root hold the value"
    );

    // An unset name given with -e, and Lazaret's own names, are refused.
    let out = ws
        .lazaret(&["run", "-e", "NOPE", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("NOPE: not set"),
        "{}",
        text(&out.stderr)
    );
    let out = ws
        .lazaret(&["run", "-e", "LAZARET_SESSION_ID=x", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
}

/// Issue 26, item 6: `host_ca_file` is read without following links, must
/// lie where no sandbox writes, and only its certificate blocks reach the
/// sandbox (a file that holds a private key is refused). As the attacker:
/// a sandbox that can write where the bundle lies replaces it with a link
/// to a host file holding a certificate and its key; on the code before,
/// the next start copied that file whole, key included, into
/// `/.lazaret/host-ca.pem`.
#[test]
fn host_ca_file_is_read_without_links_and_only_certificates_reach_the_sandbox() {
    let env = require_env!();
    let ws = env.workspace("hostca-only");
    let ca = ws.base.join("ca");
    let c = ca.display().to_string();
    let out = env.sh(&format!(
        "set -e; mkdir -p '{c}'; cd '{c}'
         openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj '/CN=Lazaret Test CA' 2>/dev/null
         {{ echo '# a comment'; cat ca.pem; echo 'trailing text'; }} > bundle.pem
         cat ca.pem ca.key > with-key.pem
         ln -s bundle.pem link.pem"
    ));
    assert!(out.status.success(), "openssl: {}", text(&out.stderr));
    let cert = std::fs::read_to_string(ca.join("ca.pem")).unwrap();
    let trust = |file: &str| {
        ws.write_config(&format!(
            "[profiles.default]\ntrust_host_ca = true\nhost_ca_file = \"{file}\"\n"
        ))
    };
    let refused = |what: &str| {
        let out = ws.run_sh("cat /.lazaret/host-ca.pem; echo ran");
        let err = text(&out.stderr);
        assert!(
            !text(&out.stdout).contains("PRIVATE KEY"),
            "the key reached the sandbox: {}",
            text(&out.stdout)
        );
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(!text(&out.stdout).contains("ran"), "it started: {err}");
        assert!(err.contains(what), "no `{what}`: {err}");
        err
    };

    // The attacker's move, from inside: the bundle the profile names in
    // the workspace becomes a link to the host's certificate-and-key file.
    let out = ws.run_sh(&format!(
        "mkdir -p /workspace/certs && ln -s '{c}/with-key.pem' /workspace/certs/ca.pem && echo planted"
    ));
    assert_eq!(text(&out.stdout), "planted\n", "{}", text(&out.stderr));
    assert_domain_gone(&ws.domain_id("default"));
    let config =
        std::fs::canonicalize(trust(&format!("{}/certs/ca.pem", ws.path.display()))).unwrap();
    let err = refused(&format!(
        "lies inside the workspace {}, which a sandbox can write",
        ws.path.display()
    ));
    assert!(
        err.contains(&format!("config {}:3: ", config.display()))
            && err.contains("for key `profiles.default.host_ca_file`"),
        "{err}"
    );

    // Outside the workspace: a link is refused, naming it; so is a file
    // with a private key.
    trust(&format!("{c}/link.pem"));
    refused(&format!("{c}/link.pem is a symbolic link"));
    trust(&format!("{c}/with-key.pem"));
    refused("begins a private key");

    // A real bundle: only its certificate blocks arrive.
    trust(&format!("{c}/bundle.pem"));
    let out = ws.run_sh("cat /.lazaret/host-ca.pem");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), cert, "{}", text(&out.stderr));
    assert_domain_gone(&ws.domain_id("default"));

    // The system bundle: certificate blocks only, too.
    ws.write_config("[profiles.default]\ntrust_host_ca = true\n");
    let out = ws.run_sh("cat /.lazaret/host-ca.pem");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.starts_with("-----BEGIN CERTIFICATE-----\n"),
        "{shown}"
    );
    for line in shown.lines() {
        assert!(
            line == "-----BEGIN CERTIFICATE-----"
                || line == "-----END CERTIFICATE-----"
                || line
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b)),
            "not a certificate line: {line:?}"
        );
    }
}
