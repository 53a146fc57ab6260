//! Published ports end to end (issue 28, item 3), with the real runsc, as
//! the unprivileged user: `lazaret run -p` and the profile's `ports` let
//! host processes reach a listener the agent starts later inside; a taken
//! host port or a bad spec refuses the start and leaves nothing running;
//! `lazaret ps` shows the ports; a listener on the sandbox's own loopback
//! (an OAuth callback, a dev server bound to 127.0.0.1) is reachable too;
//! and the sandbox reaches neither the host-side sockets nor any host
//! service through them.
//!
//! Every `lazaret run` runs inside the test's own network namespace (see
//! [`TestNet`]), which stands for the host: its loopback, its interface
//! address 203.0.113.1 and its test services (TCP 8080 on each address,
//! answering "SERVED-OK <address>") are the host's.

use lazaret_tests::{
    assert_domain_gone, eventually, require_env, test_net, text, TestNet, Workspace,
};
use std::process::{Child, Stdio};
use std::time::Duration;

/// On the host side: `GET /hello` from the URL's server; prints the body,
/// or `ERR <reason>`.
const FETCH: &str = r#"
import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode().strip())
except Exception as e:
    print("ERR", type(e).__name__, e)
"#;

/// Inside: for each `HOST:PORT`, connect, send an HTTP request, print
/// `TARGET OK <first bytes>` or `TARGET ERR <errno or reason>`.
const PROBE: &str = r#"
import socket, sys
for t in sys.argv[1:]:
    host, port = t.rsplit(":", 1)
    try:
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(b"GET /hello HTTP/1.0\r\n\r\n")
        data = s.recv(4096)
        print(t, "OK", data.decode(errors="replace").replace("\n", " ")[:200] if data else "<closed>")
    except OSError as e:
        print(t, "ERR", e.errno if e.errno is not None else "timeout")
"#;

fn py(script: &str, args: &[&str]) -> String {
    let mut s = format!("python3 -c '{}'", script.replace('\'', "'\"'\"'"));
    for a in args {
        s.push_str(&format!(" '{a}'"));
    }
    s
}

/// `FETCH url` as the test user on the test "host".
fn fetch(ws: &Workspace, net: &TestNet, url: &str) -> String {
    let mut c = ws.env.command("python3");
    c.args(["-c", FETCH, url]);
    let out = net.wrap(&c).output().expect("python3 on the host side");
    text(&out.stdout).trim().to_string()
}

/// A session that keeps the Domain up.
fn keep_up(ws: &Workspace, net: &TestNet, args: &[&str]) -> Child {
    let mut a = vec!["run"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--", "sleep", "300"]);
    ws.lazaret_in(net, &a)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A session serving `/hello` (holding `token`) on the sandbox's address,
/// port 3000, as a dev server started with `--host` does.
fn serve_inside(ws: &Workspace, net: &TestNet, token: &str) -> Child {
    serve_inside_on(ws, net, token, "0.0.0.0", 3000)
}

/// A session serving `/hello` (holding `token`) on `bind:port` inside.
fn serve_inside_on(ws: &Workspace, net: &TestNet, token: &str, bind: &str, port: u16) -> Child {
    let script = format!(
        "mkdir -p /tmp/srv-{port} && echo {token} > /tmp/srv-{port}/hello && exec python3 -m http.server {port} --bind {bind} --directory /tmp/srv-{port}"
    );
    ws.lazaret_in(net, &["run", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn ps_json(ws: &Workspace, net: &TestNet) -> serde_json::Value {
    let out = ws.lazaret_in(net, &["ps", "--json"]).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

fn row(v: &serde_json::Value, id: &str) -> Option<serde_json::Value> {
    v.as_array()?.iter().find(|d| d["domain_id"] == id).cloned()
}

fn stop(ws: &Workspace, net: &TestNet, sessions: Vec<Child>) {
    let out = ws.lazaret_in(net, &["stop"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    for mut s in sessions {
        let _ = s.wait();
    }
    assert_domain_gone(&ws.domain_id("default"));
}

/// Whether the test "host" can bind `127.0.0.1:port` now.
fn host_port_free(net: &TestNet, port: u16) -> bool {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &net.name, "python3", "-c"])
        .arg(format!(
            "import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', {port})); print('FREE')"
        ))
        .output()
        .unwrap();
    text(&out.stdout).contains("FREE")
}

#[test]
fn a_server_started_later_inside_is_reachable_at_the_published_port() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("ports-later");
    let id = ws.domain_id("default");
    let first = keep_up(&ws, &net, &["-p", "18080:3000"]);
    assert!(eventually(Duration::from_secs(60), || {
        row(&ps_json(&ws, &net), &id).is_some_and(|r| r["session_count"] == 1)
    }));
    let r = row(&ps_json(&ws, &net), &id).unwrap();
    assert_eq!(
        r["ports"],
        serde_json::json!([{"host_addr": "127.0.0.1", "host_port": 18080, "sandbox_port": 3000}]),
        "{r}"
    );
    let table = text(&ws.lazaret_in(&net, &["ps"]).output().unwrap().stdout);
    assert!(
        table.contains("PORTS") && table.contains("127.0.0.1:18080->3000"),
        "{table}"
    );

    // Nothing listens inside yet: the host gets no body.
    let url = "http://127.0.0.1:18080/hello";
    assert!(fetch(&ws, &net, url).starts_with("ERR"));

    // A dev server the agent starts later, in another session, on the
    // sandbox's address (0.0.0.0, as dev servers bind with --host).
    let server = serve_inside(&ws, &net, "PORTS-SERVED-7c1e");
    assert!(
        eventually(Duration::from_secs(30), || fetch(&ws, &net, url)
            == "PORTS-SERVED-7c1e"),
        "the host never got the server's bytes: {}",
        fetch(&ws, &net, url)
    );

    // Joining with a port the Domain does not publish is refused, never
    // joined without it; with the same one, it joins.
    let out = ws
        .lazaret_in(&net, &["run", "-p", "18081:3001", "--", "true"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("127.0.0.1:18081->3001") && err.contains("lazaret stop"),
        "{err}"
    );
    let out = ws
        .lazaret_in(&net, &["run", "-p", "18080:3000", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    stop(&ws, &net, vec![first, server]);
    // The host side went with the Domain.
    assert!(host_port_free(&net, 18080));
    assert!(fetch(&ws, &net, url).starts_with("ERR"));
}

#[test]
fn listeners_on_the_sandboxs_loopback_are_reachable_at_the_published_ports() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("ports-loopback");
    let id = ws.domain_id("default");
    // Codex's "Sign in with ChatGPT" callback listens on 127.0.0.1:1455
    // inside; a server may bind the sandbox's address only, too.
    let first = keep_up(&ws, &net, &["-p", "1455:1455", "-p", "18173:5173"]);
    assert!(eventually(Duration::from_secs(60), || {
        row(&ps_json(&ws, &net), &id).is_some_and(|r| r["session_count"] == 1)
    }));
    let callback = "http://127.0.0.1:1455/hello";
    let dev = "http://127.0.0.1:18173/hello";
    assert!(fetch(&ws, &net, callback).starts_with("ERR"));
    let v4 = serve_inside_on(&ws, &net, "LOOPBACK-V4-51e0", "127.0.0.1", 1455);
    let own = serve_inside_on(&ws, &net, "OWN-ADDRESS-0c7a", "10.0.2.100", 5173);
    assert!(
        eventually(Duration::from_secs(30), || fetch(&ws, &net, callback)
            == "LOOPBACK-V4-51e0"),
        "the host never reached the loopback listener: {}",
        fetch(&ws, &net, callback)
    );
    assert!(
        eventually(Duration::from_secs(30), || fetch(&ws, &net, dev)
            == "OWN-ADDRESS-0c7a"),
        "the host never reached the listener on the sandbox's address: {}",
        fetch(&ws, &net, dev)
    );
    // The in-sandbox relay belongs to the sandbox: killed from inside, it
    // is back within a few seconds, and it breaks nothing but these ports.
    let out = ws.run_sh_in(
        &net,
        "for p in /proc/[0-9]*; do e=$(tr '\\0' '\\n' < $p/cmdline | head -n1); if [ \"$e\" = /.lazaret/bin/lazaret-port-relay ]; then kill -9 ${p#/proc/} && echo KILLED; else echo \"seen $p $e\"; fi; done",
    );
    assert!(
        text(&out.stdout).contains("KILLED"),
        "no lazaret-port-relay inside: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        eventually(Duration::from_secs(30), || fetch(&ws, &net, callback)
            == "LOOPBACK-V4-51e0"),
        "the relay did not come back: {}",
        fetch(&ws, &net, callback)
    );
    stop(&ws, &net, vec![first, v4, own]);
    assert!(host_port_free(&net, 1455));
}

#[test]
fn a_taken_host_port_refuses_the_start_and_leaves_nothing_running() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("ports-taken");
    let id = ws.domain_id("default");
    // A host service already on 127.0.0.1:18090.
    let mut holder = std::process::Command::new("ip")
        .args(["netns", "exec", &net.name, "python3", "-c"])
        .arg("import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 18090)); s.listen(); print('ready', flush=True); sys.stdin.read()")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead;
        let mut line = String::new();
        let mut r = std::io::BufReader::new(holder.stdout.take().unwrap());
        r.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
    }
    let out = ws
        .lazaret_in(&net, &["run", "-p", "18090:80", "--", "echo", "RAN"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("127.0.0.1:18090") && err.contains("in use"),
        "{err}"
    );
    assert!(!text(&out.stdout).contains("RAN"));
    assert_domain_gone(&id);
    assert!(row(&ps_json(&ws, &net), &id).is_none());
    drop(holder.stdin.take());
    let _ = holder.kill();
    let _ = holder.wait();
    // Free again, the same command starts.
    let out = ws
        .lazaret_in(&net, &["run", "-p", "18090:80", "--", "echo", "RAN"])
        .output()
        .unwrap();
    assert!(text(&out.stdout).contains("RAN"), "{}", text(&out.stderr));
    assert_domain_gone(&id);
}

#[test]
fn bad_port_specs_are_refused_naming_the_option_or_the_key() {
    let env = require_env!();
    let ws = env.workspace("ports-bad");
    let id = ws.domain_id("default");
    for (spec, says) in [
        ("0:80", "host port"),
        ("70000:80", "host port"),
        ("8080:0", "sandbox port"),
        ("garbage", "HOST_PORT:SANDBOX_PORT"),
        ("localhost:8080:80", "IPv4"),
    ] {
        let out = ws
            .lazaret(&["run", "-p", spec, "--", "echo", "RAN"])
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{spec}: {err}");
        assert!(
            err.contains(&format!("-p/--publish {spec}:")) && err.contains(says),
            "{spec}: {err}"
        );
        assert!(!text(&out.stdout).contains("RAN"));
    }
    // The profile's key, by file, line and key.
    let cfg = ws.write_config("[profiles.default]\nports = [\n  \"8080:3000\",\n  \"99999:1\",\n]");
    let out = ws.lazaret(&["run", "--", "echo", "RAN"]).output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains(&format!("{}:4", cfg.display()))
            && err.contains("profiles.default.ports[1]")
            && err.contains("1 to 65535"),
        "{err}"
    );
    // No network, no ports.
    ws.write_config("[profiles.default.network]\nmode = \"none\"");
    let out = ws
        .lazaret(&["run", "-p", "8080:80", "--", "echo", "RAN"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("network.mode = \"none\""), "{err}");
    assert!(!text(&out.stdout).contains("RAN"));
    assert_domain_gone(&id);
}

#[test]
fn the_sandbox_reaches_no_host_socket_or_service_through_a_published_port() {
    let env = require_env!();
    let Some(net) = test_net() else { return };
    let ws = env.workspace("ports-attacker");
    let id = ws.domain_id("default");
    // The widest publication: every host address, the interface's
    // 203.0.113.1 included; the profile's key this time.
    ws.write_config("[profiles.default]\nports = [\"0.0.0.0:18100:3000\"]");
    let first = keep_up(&ws, &net, &[]);
    assert!(eventually(Duration::from_secs(60), || {
        row(&ps_json(&ws, &net), &id).is_some_and(|r| r["session_count"] == 1)
    }));
    let mut err = String::new();
    let mut first = first;
    // The warning is on the first session's stderr; read it after stop.
    let server = serve_inside(&ws, &net, "INSIDE-SERVER-b3d9");
    // The port works from the host, so what follows can fail.
    let url = "http://127.0.0.1:18100/hello";
    assert!(
        eventually(Duration::from_secs(30), || fetch(&ws, &net, url)
            == "INSIDE-SERVER-b3d9"),
        "{}",
        fetch(&ws, &net, url)
    );
    assert_eq!(
        fetch(&ws, &net, "http://203.0.113.1:18100/hello"),
        "INSIDE-SERVER-b3d9"
    );

    // From inside: the host-side sockets through slirp's host-loopback
    // alias and the host's interface address, the host's own services
    // there, and the inside loopback on the host port.
    let targets = [
        "10.0.2.2:18100",
        "203.0.113.1:18100",
        "10.0.2.2:8080",
        "203.0.113.1:8080",
        "127.0.0.1:18100",
        "10.0.2.2:61000",
    ];
    let out = ws.run_sh_in(&net, &py(PROBE, &targets));
    let stdout = text(&out.stdout);
    for t in targets {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{t} ")))
            .unwrap_or_else(|| panic!("no result for {t}: {stdout}\n{}", text(&out.stderr)));
        assert!(
            line.starts_with(&format!("{t} ERR")),
            "the sandbox reached {t}: {line}"
        );
        assert!(
            !line.contains("SERVED-OK") && !line.contains("INSIDE-SERVER"),
            "{line}"
        );
    }

    stop(&ws, &net, vec![server]);
    let _ = first.wait();
    use std::io::Read;
    first
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("0.0.0.0:18100->3000") && err.contains("reachable from the network"),
        "{err}"
    );
}
