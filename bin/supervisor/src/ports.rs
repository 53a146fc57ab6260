//! Published ports (`lazaret run -p`, the profile's `ports`): host
//! processes connect to a host socket and reach a listener inside.
//!
//! ```text
//! host client ── HOST_ADDR:HOST_PORT  (bound by the supervisor in the host's netns)
//!              └ relay (threads of the holder, in N1)
//!                  ── 127.0.0.1:FORWARD_PORT in N1 (slirp4netns B's forward)
//!                      ── 10.0.2.100:FORWARD_PORT in N2, from 10.0.2.2
//!                         (slirp's gateway): lazaret-port-relay inside
//!                          ── 127.0.0.1:SANDBOX_PORT (else 10.0.2.100):
//!                             the sandbox's listener
//! ```
//!
//! The supervisor binds the host sides before the holder exists, so a
//! taken port fails the start before anything runs, and only the address
//! asked for is bound. The holder inherits them and relays each accepted
//! connection to the forward slirp4netns B was given through its API
//! socket. Each connection enters N1 on N1's loopback, never from
//! slirp4netns A's side: the policy's routes are not involved, and nothing
//! here routes a packet from the sandbox towards the host. (The loopback,
//! not N1's address on the link: slirp4netns B keeps a client's address
//! unless it is a loopback one, and gVisor drops a connection that comes
//! from its own address, 10.0.2.100, which N1's is too.) The sandbox
//! cannot reach N1's loopback: slirp4netns B runs with
//! `--disable-host-loopback`. The sandbox can
//! answer a connection, never open one: the relay only accepts on the
//! host side and only connects to the fixed forward in N1.
//!
//! Inside, the forward arrives at `lazaret-port-relay` (started by the
//! sandbox's init, [`crate::bundle::init_args`]) on the same port number,
//! which connects from within the sandbox, where its loopback is: a login's
//! OAuth callback on `127.0.0.1:1455` or a dev server bound to 127.0.0.1
//! takes connections from its own loopback only. The relay is the
//! sandbox's own process and holds nothing of the host's; stopping it
//! breaks only the sandbox's own published ports.
//!
//! slirp4netns B's API socket lives in the Domain's run directory (never
//! mounted into the sandbox) only while the forwards are added; it is
//! removed after, so nothing can add forwards later (ports are set when
//! the Domain starts).

use lazaret_protocol::plan::PublishedPort;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{FromRawFd, IntoRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Where slirp4netns B's forwards listen in N1: its loopback.
const N1_ADDR: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// The forwards' ports in N1, and the same numbers inside, where
/// `lazaret-port-relay` listens: above Linux's ephemeral range
/// (32768-60999), so no outbound socket of slirp4netns B holds one, and
/// bound inside by the init before any session starts.
const FORWARD_BASE: u16 = 61000;
/// slirp4netns B's API socket, in `SandboxNetwork::api_socket_dir`.
pub const API_SOCKET: &str = "slirp-b.sock";
/// The most connections relayed at once, over all ports.
const MAX_CONNECTIONS: usize = 256;

/// Why a port was not published.
#[derive(Debug, thiserror::Error)]
pub enum PortsError {
    #[error("cannot publish port {port}: host port {}:{} cannot be bound ({}); choose another host port with -p HOST_PORT:{}", port.host_addr, port.host_port, why_unbound(source), port.sandbox_port)]
    Bind {
        port: PublishedPort,
        source: std::io::Error,
    },
    #[error("cannot open {}: {source}", dir.display())]
    ApiDir {
        dir: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("slirp4netns B's API socket does not answer")]
    ApiSilent,
    #[error("slirp4netns B's API socket: {0}")]
    Api(std::io::Error),
    /// slirp4netns' own description, shown safely.
    #[error(
        "slirp4netns B refused the forward of sandbox port {sandbox_port}: {}",
        lazaret_protocol::display::message(desc)
    )]
    Refused { sandbox_port: u16, desc: String },
    #[error("slirp4netns B's API socket gave an answer that is not one")]
    BadAnswer,
    #[error("no forward for a published port")]
    NoForward,
    #[error("cannot start the relay of port {port}: {source}")]
    Relay {
        port: PublishedPort,
        source: std::io::Error,
    },
}

/// Why a host port cannot be bound, in the words [`PortsError::Bind`] uses.
fn why_unbound(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => "it is in use on the host".to_string(),
        _ => e.to_string(),
    }
}

/// The host sides, bound in the host's network namespace (the caller's).
pub fn bind_host(ports: &[PublishedPort]) -> Result<Vec<TcpListener>, PortsError> {
    ports
        .iter()
        .map(|&port| {
            TcpListener::bind(SocketAddrV4::new(port.host_addr, port.host_port))
                .map_err(|source| PortsError::Bind { port, source })
        })
        .collect()
}

/// The raw descriptors, for the holder's clone (which takes them over).
pub fn into_raw(listeners: Vec<TcpListener>) -> Vec<RawFd> {
    listeners.into_iter().map(IntoRawFd::into_raw_fd).collect()
}

/// In the holder: takes over the descriptors [`into_raw`] gave.
pub fn from_raw(fds: &[RawFd]) -> Vec<TcpListener> {
    fds.iter()
        // SAFETY: each is a listening socket the supervisor bound and the
        // clone inherited; the holder takes its copy over, once.
        .map(|&fd| unsafe { TcpListener::from_raw_fd(fd) })
        .collect()
}

/// One forward of slirp4netns B per distinct sandbox port:
/// `(sandbox port, its port in N1 and lazaret-port-relay's inside)`.
pub fn forwards(ports: &[PublishedPort]) -> Vec<(u16, u16)> {
    let mut sandbox: Vec<u16> = ports.iter().map(|p| p.sandbox_port).collect();
    sandbox.sort_unstable();
    sandbox.dedup();
    sandbox.into_iter().zip(FORWARD_BASE..).collect()
}

/// `lazaret-port-relay`'s arguments: `FORWARD_PORT=SANDBOX_PORT` each.
pub fn relay_args(ports: &[PublishedPort]) -> Vec<String> {
    forwards(ports)
        .into_iter()
        .map(|(sandbox, forward)| format!("{forward}={sandbox}"))
        .collect()
}

#[derive(serde::Deserialize)]
struct ApiError {
    desc: String,
}

/// slirp4netns' answer: `{"return": ...}` or `{"error": {"desc": ...}}`.
#[derive(serde::Deserialize)]
struct ApiAnswer {
    #[serde(rename = "return")]
    ok: Option<serde::de::IgnoredAny>,
    error: Option<ApiError>,
}

/// One `add_hostfwd` request to slirp4netns B's API socket: one request
/// per connection, ended by `shutdown(SHUT_WR)`, as slirp4netns wants.
/// `n1_port` in N1 goes to the same port inside, `lazaret-port-relay`'s
/// for `sandbox_port`.
fn add_hostfwd(dir: &Path, n1_port: u16, sandbox_port: u16) -> Result<(), PortsError> {
    let short =
        lazaret_helpers::sockpath::short(dir, API_SOCKET).map_err(|source| PortsError::ApiDir {
            dir: dir.to_path_buf(),
            source,
        })?;
    // slirp4netns binds its API socket as it starts; it is there by the
    // time it reports ready, but give it a moment rather than fail.
    let mut stream = None;
    for _ in 0..100 {
        match std::os::unix::net::UnixStream::connect(&short.path) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let mut s = stream.ok_or(PortsError::ApiSilent)?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let request = serde_json::json!({
        "execute": "add_hostfwd",
        "arguments": {
            "proto": "tcp",
            "host_addr": N1_ADDR.to_string(),
            "host_port": n1_port,
            "guest_port": n1_port,
        }
    });
    s.write_all(request.to_string().as_bytes())
        .and_then(|()| s.shutdown(std::net::Shutdown::Write))
        .map_err(PortsError::Api)?;
    let mut answer = Vec::new();
    (&mut s)
        .take(4096)
        .read_to_end(&mut answer)
        .map_err(PortsError::Api)?;
    match serde_json::from_slice::<ApiAnswer>(&answer) {
        Ok(ApiAnswer { ok: Some(_), .. }) => Ok(()),
        Ok(ApiAnswer {
            error: Some(ApiError { desc }),
            ..
        }) => Err(PortsError::Refused { sandbox_port, desc }),
        _ => Err(PortsError::BadAnswer),
    }
}

/// In the holder, once slirp4netns B is ready: its forwards, then the API
/// socket is removed, then the relay starts on the host sockets.
pub fn publish(
    dir: &Path,
    ports: &[PublishedPort],
    host: Vec<TcpListener>,
) -> Result<(), PortsError> {
    let forwards = forwards(ports);
    let added = forwards
        .iter()
        .try_for_each(|&(sandbox, n1)| add_hostfwd(dir, n1, sandbox));
    let _ = std::fs::remove_file(dir.join(API_SOCKET));
    added?;
    let active = Arc::new(AtomicUsize::new(0));
    for (&port, listener) in ports.iter().zip(host) {
        let n1 = forwards
            .iter()
            .find(|(s, _)| *s == port.sandbox_port)
            .map(|&(_, n1)| n1)
            .ok_or(PortsError::NoForward)?;
        let active = active.clone();
        std::thread::Builder::new()
            .name(format!("relay-{}", port.host_port))
            .spawn(move || accept_loop(listener, SocketAddrV4::new(N1_ADDR, n1), active))
            .map_err(|source| PortsError::Relay { port, source })?;
    }
    Ok(())
}

fn accept_loop(listener: TcpListener, forward: SocketAddrV4, active: Arc<AtomicUsize>) {
    loop {
        let Ok((client, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let active = active.clone();
        let _ = std::thread::Builder::new()
            .name("relay-conn".into())
            .spawn(move || {
                relay(client, forward);
                active.fetch_sub(1, Ordering::SeqCst);
            });
    }
}

/// Copies both ways until each side has ended its half; the bytes are
/// never looked at.
fn relay(client: TcpStream, forward: SocketAddrV4) {
    let Ok(inside) = TcpStream::connect_timeout(&forward.into(), Duration::from_secs(10)) else {
        return;
    };
    let (Ok(mut client_r), Ok(mut inside_w)) = (client.try_clone(), inside.try_clone()) else {
        return;
    };
    let up = std::thread::Builder::new()
        .name("relay-up".into())
        .spawn(move || {
            let _ = std::io::copy(&mut client_r, &mut inside_w);
            let _ = inside_w.shutdown(std::net::Shutdown::Write);
        });
    let (mut inside_r, mut client_w) = (inside, client);
    let _ = std::io::copy(&mut inside_r, &mut client_w);
    let _ = client_w.shutdown(std::net::Shutdown::Write);
    if let Ok(up) = up {
        let _ = up.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(host_port: u16, sandbox_port: u16) -> PublishedPort {
        PublishedPort {
            host_addr: Ipv4Addr::LOCALHOST,
            host_port,
            sandbox_port,
        }
    }

    #[test]
    fn one_forward_per_sandbox_port_above_the_ephemeral_range() {
        assert_eq!(
            forwards(&[p(8080, 3000), p(8081, 80), p(8082, 3000)]),
            [(80, 61000), (3000, 61001)]
        );
        assert!(forwards(&[]).is_empty());
        assert_eq!(
            relay_args(&[p(8080, 3000), p(8081, 80), p(8082, 3000)]),
            ["61000=80", "61001=3000"]
        );
    }

    #[test]
    fn a_taken_host_port_is_refused_by_name() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let e = bind_host(&[p(port, 80)]).unwrap_err().to_string();
        assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
        assert!(e.contains("in use"), "{e}");
    }
}
