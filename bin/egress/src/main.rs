//! `lazaret-egress`: the egress Pod's entrypoint (see the library for
//! what it decides).
//!
//! ```text
//! lazaret-egress --policy FILE --digest HEX [--dns ADDR:PORT] [--proxy ADDR:PORT] [--resolv-conf FILE]
//! ```
//!
//! One line per decision on stdout (`kubectl logs`). Exit codes: 2 bad
//! arguments or policy, 3 cannot listen or no upstream resolver.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lazaret_egress::{nameservers, parse_connect, Egress};

/// At most this many connections or lookups at once: a flood from the
/// agent waits, it does not exhaust this Pod.
const MAX_INFLIGHT: usize = 256;
/// The longest proxy request head.
const MAX_HEAD: usize = 8192;
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

fn die(code: i32, msg: impl std::fmt::Display) -> ! {
    eprintln!("lazaret-egress: {msg}");
    std::process::exit(code)
}

struct Args {
    policy: PathBuf,
    digest: String,
    dns: SocketAddr,
    proxy: SocketAddr,
    resolv_conf: PathBuf,
}

fn args() -> Args {
    let mut policy = None;
    let mut digest = None;
    let mut dns: SocketAddr = ([0, 0, 0, 0], 53).into();
    let mut proxy: SocketAddr = ([0, 0, 0, 0], 3128).into();
    let mut resolv_conf = PathBuf::from("/etc/resolv.conf");
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| die(2, format!("{a} needs a value")))
        };
        let addr = |v: String| {
            v.parse()
                .unwrap_or_else(|_| die(2, format!("{a} {v:?} is not an ADDRESS:PORT")))
        };
        match a.as_str() {
            "--policy" => policy = Some(PathBuf::from(value())),
            "--digest" => digest = Some(value()),
            "--dns" => dns = addr(value()),
            "--proxy" => proxy = addr(value()),
            "--resolv-conf" => resolv_conf = PathBuf::from(value()),
            "--help" | "-h" => {
                println!("usage: lazaret-egress --policy FILE --digest HEX [--dns ADDR:PORT] [--proxy ADDR:PORT] [--resolv-conf FILE]");
                std::process::exit(0)
            }
            other => die(2, format!("unknown argument {other:?}")),
        }
    }
    Args {
        policy: policy.unwrap_or_else(|| die(2, "--policy FILE is needed")),
        digest: digest.unwrap_or_else(|| die(2, "--digest HEX is needed")),
        dns,
        proxy,
        resolv_conf,
    }
}

/// Runs `f` on a thread of its own unless `MAX_INFLIGHT` are running;
/// then on this one (the listener waits: back-pressure).
fn spawn(inflight: &Arc<AtomicUsize>, f: impl FnOnce() + Send + 'static) {
    if inflight.fetch_add(1, Ordering::SeqCst) >= MAX_INFLIGHT {
        f();
        inflight.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    let n = inflight.clone();
    let spawned = std::thread::Builder::new().spawn(move || {
        f();
        n.fetch_sub(1, Ordering::SeqCst);
    });
    if spawned.is_err() {
        inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn serve_udp(egress: Arc<Egress>, sock: UdpSocket, inflight: Arc<AtomicUsize>) {
    let sock = Arc::new(sock);
    let mut buf = vec![0u8; 4096];
    loop {
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        let query = buf[..n].to_vec();
        let (e, s) = (egress.clone(), sock.clone());
        spawn(&inflight, move || {
            let (answer, log) = e.dns(&query);
            println!("{from}: {log}");
            if let Some(a) = answer {
                let _ = s.send_to(&a, from);
            }
        });
    }
}

/// DNS over TCP: each message with its two-byte length.
fn serve_dns_tcp(egress: &Egress, mut c: TcpStream) {
    let _ = c.set_read_timeout(Some(HEAD_TIMEOUT));
    let peer = c.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    loop {
        let mut len = [0u8; 2];
        if c.read_exact(&mut len).is_err() {
            return;
        }
        let mut query = vec![0u8; u16::from_be_bytes(len) as usize];
        if c.read_exact(&mut query).is_err() {
            return;
        }
        let (answer, log) = egress.dns(&query);
        println!("{peer}: {log} (tcp)");
        let Some(a) = answer else { return };
        let Ok(n) = u16::try_from(a.len()) else {
            return;
        };
        if c.write_all(&n.to_be_bytes())
            .and_then(|()| c.write_all(&a))
            .is_err()
        {
            return;
        }
    }
}

/// Reads the request head (up to the blank line); what came after it.
fn read_head(c: &mut TcpStream) -> Result<(String, Vec<u8>), String> {
    let _ = c.set_read_timeout(Some(HEAD_TIMEOUT));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf[end + 4..].to_vec();
            buf.truncate(end);
            let _ = c.set_read_timeout(None);
            return String::from_utf8(buf)
                .map(|h| (h, rest))
                .map_err(|_| "the request is not text".into());
        }
        if buf.len() > MAX_HEAD {
            return Err(format!("the request head is longer than {MAX_HEAD} bytes"));
        }
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => return Err("the request ended early".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn refuse(c: &mut TcpStream, status: &str, why: impl std::fmt::Display) {
    let body = format!("lazaret-egress: {why}\n");
    let _ = write!(
        c,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn serve_proxy(egress: &Egress, mut c: TcpStream) {
    let peer = c.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let (head, early) = match read_head(&mut c) {
        Ok(h) => h,
        Err(why) => return refuse(&mut c, "400 Bad Request", &why),
    };
    let (host, port) = match parse_connect(&head) {
        Ok(t) => t,
        Err(why) => {
            println!("{peer}: proxy refused: {why}");
            return refuse(&mut c, "405 Method Not Allowed", &why);
        }
    };
    let targets = match egress.destinations(&host, port) {
        Ok(t) => t,
        Err(why) => {
            println!("{peer}: proxy refused {host}:{port}: {why}");
            return refuse(&mut c, "403 Forbidden", &why);
        }
    };
    let Some(mut upstream) = targets
        .iter()
        .find_map(|t| TcpStream::connect_timeout(&(*t).into(), CONNECT_TIMEOUT).ok())
    else {
        println!("{peer}: proxy {host}:{port}: no address answered ({targets:?})");
        return refuse(&mut c, "502 Bad Gateway", "no address of it answered");
    };
    println!(
        "{peer}: proxy {host}:{port} -> {}",
        upstream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default()
    );
    if c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .is_err()
        || upstream.write_all(&early).is_err()
    {
        return;
    }
    let (Ok(mut c2), Ok(mut u2)) = (c.try_clone(), upstream.try_clone()) else {
        return;
    };
    let back = std::thread::spawn(move || {
        let _ = std::io::copy(&mut u2, &mut c2);
        let _ = c2.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut c, &mut upstream);
    let _ = upstream.shutdown(std::net::Shutdown::Write);
    let _ = back.join();
}

fn listen_tcp(addr: SocketAddr) -> TcpListener {
    TcpListener::bind(addr)
        .unwrap_or_else(|e| die(3, format!("cannot listen on {addr} (TCP): {e}")))
}

fn main() {
    let a = args();
    let resolv = std::fs::read_to_string(&a.resolv_conf).unwrap_or_default();
    let upstream = nameservers(&resolv);
    if upstream.is_empty() {
        die(
            3,
            format!("{} names no IPv4 nameserver", a.resolv_conf.display()),
        );
    }
    let egress =
        Arc::new(Egress::load(&a.policy, &a.digest, upstream).unwrap_or_else(|e| die(2, e)));
    let udp = UdpSocket::bind(a.dns)
        .unwrap_or_else(|e| die(3, format!("cannot listen on {} (UDP): {e}", a.dns)));
    let dns_tcp = listen_tcp(a.dns);
    let proxy = listen_tcp(a.proxy);
    println!(
        "lazaret-egress: ready, policy {} ({}), dns {}, proxy {}, upstream {:?}",
        a.policy.display(),
        egress.policy.binding,
        a.dns,
        a.proxy,
        egress.upstream
    );
    let inflight = Arc::new(AtomicUsize::new(0));
    {
        let (e, n) = (egress.clone(), inflight.clone());
        std::thread::spawn(move || serve_udp(e, udp, n));
    }
    {
        let (e, n) = (egress.clone(), inflight.clone());
        std::thread::spawn(move || {
            for c in dns_tcp.incoming().flatten() {
                let e = e.clone();
                spawn(&n, move || serve_dns_tcp(&e, c));
            }
        });
    }
    for c in proxy.incoming().flatten() {
        let e = egress.clone();
        spawn(&inflight, move || serve_proxy(&e, c));
    }
}
