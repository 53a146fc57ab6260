//! `lazaret-port-relay LISTEN=TARGET...`: runs inside the sandbox, started
//! by the sandbox's init when the Domain publishes ports, and carries each
//! connection that slirp4netns B's forward brings to `0.0.0.0:LISTEN` on to
//! whatever listens on `TARGET` inside:
//!
//! ```text
//! host ── supervisor relay ── slirp4netns B forward ── 10.0.2.100:LISTEN
//!      ── lazaret-port-relay ── 127.0.0.1:TARGET, else 10.0.2.100:TARGET
//! ```
//!
//! Without it only a listener on the sandbox's address (`0.0.0.0`, or
//! `--host`) is reachable: a loopback listener (a login's OAuth callback on
//! `127.0.0.1:1455`, a dev server bound to 127.0.0.1) takes connections
//! from its own sandbox's loopback only, and slirp4netns B's connections
//! come from its gateway. So the relay connects from inside, where the
//! loopback is.
//!
//! It holds nothing of the host's: it is a process of the sandbox, as
//! root as the agent is, so the agent can stop or replace it and break
//! only its own published ports. It never opens a connection anywhere but
//! inside the sandbox, and the host side only ever connects towards it
//! (`bin/supervisor/src/ports.rs`). Hence no landlock or seccomp of its own:
//! they would confine nothing the sandbox's root could not undo.
//!
//! Exit codes: 0 never (it serves until the sandbox stops); 1 when a
//! listening port cannot be bound; 2 on bad arguments.

mod confinement;

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The most connections carried at once, over all ports (as on the host
/// side).
const MAX_CONNECTIONS: usize = 256;

/// One published port, inside: where slirp4netns B's forward arrives and
/// the sandbox port the developer published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pair {
    listen: u16,
    target: u16,
}

fn parse(args: &[String]) -> Result<Vec<Pair>, String> {
    if args.is_empty() {
        return Err("no ports: usage: lazaret-port-relay LISTEN=TARGET...".into());
    }
    args.iter()
        .map(|a| {
            let (l, t) = a
                .split_once('=')
                .ok_or_else(|| format!("{a:?} is not LISTEN=TARGET"))?;
            let port = |s: &str| match s.parse::<u16>() {
                Ok(p) if p != 0 => Ok(p),
                _ => Err(format!("{s:?} in {a:?} is not a port (1-65535)")),
            };
            Ok(Pair {
                listen: port(l)?,
                target: port(t)?,
            })
        })
        .collect()
}

/// Where a connection for `target` goes, in order: the loopback first (a
/// listener on `0.0.0.0` takes those too), then the address the
/// connection arrived on (a listener bound to the sandbox's address
/// only). Not IPv6's `::1`: the sandbox has no IPv6.
fn targets(target: u16, arrived_on: SocketAddr) -> [SocketAddr; 2] {
    [
        SocketAddr::from((Ipv4Addr::LOCALHOST, target)),
        SocketAddr::new(arrived_on.ip(), target),
    ]
}

fn connect_inside(target: u16, arrived_on: SocketAddr) -> Option<TcpStream> {
    targets(target, arrived_on)
        .iter()
        .find_map(|a| TcpStream::connect_timeout(a, Duration::from_secs(5)).ok())
}

/// Copies both ways until each side has ended its half; the bytes are
/// never looked at.
fn carry(outside: TcpStream, inside: TcpStream) {
    let (Ok(mut outside_r), Ok(mut inside_w)) = (outside.try_clone(), inside.try_clone()) else {
        return;
    };
    let up = std::thread::Builder::new()
        .name("relay-up".into())
        .spawn(move || {
            let _ = std::io::copy(&mut outside_r, &mut inside_w);
            let _ = inside_w.shutdown(std::net::Shutdown::Write);
        });
    let (mut inside_r, mut outside_w) = (inside, outside);
    let _ = std::io::copy(&mut inside_r, &mut outside_w);
    let _ = outside_w.shutdown(std::net::Shutdown::Write);
    if let Ok(up) = up {
        let _ = up.join();
    }
}

fn serve(listener: TcpListener, target: u16, active: Arc<AtomicUsize>) {
    loop {
        let outside = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => {
                // Out of descriptors, most likely: let some close.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let count = active.clone();
        let spawned = std::thread::Builder::new()
            .name("relay-conn".into())
            .spawn(move || {
                let arrived_on = outside.local_addr();
                // Nothing listens for it inside: closing the connection is
                // what the host's client would have seen without a relay.
                if let Some(inside) = arrived_on.ok().and_then(|a| connect_inside(target, a)) {
                    carry(outside, inside);
                }
                count.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            // The closure (and its count) never ran.
            active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--print-confinement") {
        confinement::port_relay().print_and_exit();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let pairs = match parse(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("lazaret-port-relay: {e}");
            std::process::exit(2);
        }
    };
    let mut listeners = Vec::new();
    for p in &pairs {
        match TcpListener::bind((Ipv4Addr::UNSPECIFIED, p.listen)) {
            Ok(l) => listeners.push((l, p.target)),
            Err(e) => {
                eprintln!(
                    "lazaret-port-relay: cannot listen on port {} for published port {}: {e}",
                    p.listen, p.target
                );
                std::process::exit(1);
            }
        }
    }
    let active = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    for (listener, target) in listeners {
        let active = active.clone();
        threads.push(std::thread::spawn(move || serve(listener, target, active)));
    }
    for t in threads {
        let _ = t.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments_are_listen_target_pairs_of_real_ports() {
        assert_eq!(
            parse(&args(&["61000=3000", "61001=1455"])).unwrap(),
            [
                Pair {
                    listen: 61000,
                    target: 3000
                },
                Pair {
                    listen: 61001,
                    target: 1455
                }
            ]
        );
        for bad in [&[][..], &["61000"], &["0=80"], &["61000=70000"], &["a=b"]] {
            assert!(parse(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_loopback_comes_first_then_the_address_it_arrived_on() {
        let arrived: SocketAddr = "10.0.2.100:61000".parse().unwrap();
        assert_eq!(
            targets(1455, arrived),
            [
                "127.0.0.1:1455".parse().unwrap(),
                "10.0.2.100:1455".parse().unwrap(),
            ]
        );
    }

    #[test]
    fn a_connection_reaches_a_loopback_only_listener_and_both_halves_end() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = server.local_addr().unwrap().port();
        let relay = TcpListener::bind("127.0.0.1:0").unwrap();
        let relay_addr = relay.local_addr().unwrap();
        std::thread::spawn(move || serve(relay, target, Arc::new(AtomicUsize::new(0))));
        let echo = std::thread::spawn(move || {
            let (mut s, _) = server.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            s.write_all(&got).unwrap();
        });
        let mut c = TcpStream::connect(relay_addr).unwrap();
        c.write_all(b"PING-9f2").unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).unwrap();
        assert_eq!(back, b"PING-9f2");
        echo.join().unwrap();
    }
}
