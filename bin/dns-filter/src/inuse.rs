//! Which remote addresses the enforcement namespace's TCP sockets use:
//! slirp4netns B's connections on behalf of the sandbox. Read from
//! `/proc/self/net/tcp` through a handle opened before confinement.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// `(remote address, remote port)` of every TCP connection that is open
/// or being opened (ESTABLISHED, SYN_SENT, SYN_RECV). One that is closing
/// (FIN_WAIT, CLOSE_WAIT, LAST_ACK, CLOSING, TIME_WAIT) keeps nothing
/// routed: TIME_WAIT alone lasts a minute.
pub fn remote_peers(proc_net_tcp: &str) -> BTreeSet<(Ipv4Addr, u16)> {
    proc_net_tcp
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let _sl = f.next()?;
            let _local = f.next()?;
            let remote = f.next()?;
            let state = f.next()?;
            if !matches!(state, "01" | "02" | "03") {
                return None;
            }
            let (a, p) = remote.split_once(':')?;
            // The kernel prints the address as a host-order u32.
            let a = u32::from_str_radix(a, 16).ok()?;
            let p = u16::from_str_radix(p, 16).ok()?;
            Some((Ipv4Addr::from(a.to_ne_bytes()), p))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_and_opening_connections_count_closing_ones_and_listeners_do_not() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0035 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 10 0
   1: 6402000A:A1B2 016433C6:1F90 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1
   2: 6402000A:A1B3 026433C6:0016 02 00000000:00000000 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1
   3: 6402000A:A1B4 036433C6:0016 07 00000000:00000000 00:00000000 00000000     0        0 4 1 0 20 4 30 10 -1
   4: 6402000A:A1B5 046433C6:0016 06 00000000:00000000 00:00000000 00000000     0        0 0 1 0 20 4 30 10 -1
   5: 6402000A:A1B6 056433C6:0016 08 00000000:00000000 00:00000000 00000000     0        0 5 1 0 20 4 30 10 -1
";
        let peers = remote_peers(text);
        assert_eq!(
            peers.into_iter().collect::<Vec<_>>(),
            vec![
                ("198.51.100.1".parse().unwrap(), 8080),
                ("198.51.100.2".parse().unwrap(), 22)
            ]
        );
    }
}
