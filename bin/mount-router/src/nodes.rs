//! The router's node table: which FUSE node ID stands for which file.
//!
//! Enforces: a node follows its backing file, not its path. Its identity
//! is (store, device, inode number, file type) of the backing file, so
//! - hard links are one node (same `st_ino`, one link count for both
//!   names, and a `link` updates the source's attributes);
//! - a rename keeps the node and its number;
//! - a file that replaces a deleted one under a reused inode number is a
//!   new node: every removal the router performs (unlink, rmdir, rename
//!   over an entry) that takes a backing file's last name marks its node
//!   dead (its identity is forgotten at once, the node itself when the
//!   kernel forgets it), so the kernel never reuses its inode object for
//!   the newcomer. That object may be a deleted directory, in which
//!   nothing can be created (`rm -rf r; mkdir r; mkdir r/x`).
//!
//! A node remembers a few of the names it was reached by (hard links),
//! most recent first; operations use the first. The node ID is the backing
//! inode number when that number is free, so `stat` through the router
//! shows the host's `st_ino` (Git's index stat data stays valid on both
//! sides); otherwise a synthetic number above 2^62, which no backing file
//! system hands out.
//!
//! Leaves to others: the paths themselves (the router), and resolving
//! them safely (`sys`).

use crate::router::Store;
use rustix::fs::Stat;
use std::collections::HashMap;

/// How many names of one node are remembered.
const MAX_ALIASES: usize = 4;

/// The identity of a backing file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Backing {
    store: Store,
    dev: u64,
    ino: u64,
    fmt: u32,
}

impl Backing {
    pub fn of(store: Store, st: &Stat) -> Backing {
        Backing {
            store,
            dev: st.st_dev,
            ino: st.st_ino,
            fmt: st.st_mode & libc::S_IFMT,
        }
    }
}

struct Node {
    store: Store,
    /// Names it was reached by, most recent first; never empty.
    paths: Vec<Vec<u8>>,
    nlookup: u64,
    /// `None` for the root and for dead nodes.
    backing: Option<Backing>,
}

/// Node IDs and the files behind them.
pub struct Table {
    nodes: HashMap<u64, Node>,
    by_backing: HashMap<Backing, u64>,
    next: u64,
}

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}

impl Table {
    /// A table holding the root (node 1, the host workspace itself).
    pub fn new() -> Table {
        let mut nodes = HashMap::new();
        nodes.insert(
            1,
            Node {
                store: Store::Host,
                paths: vec![Vec::new()],
                nlookup: 1,
                backing: None,
            },
        );
        Table {
            nodes,
            by_backing: HashMap::new(),
            next: 1 << 62,
        }
    }

    /// The store and current path of node `id`.
    pub fn get(&self, id: u64) -> Option<(Store, Vec<u8>)> {
        self.nodes.get(&id).map(|n| (n.store, n.paths[0].clone()))
    }

    /// The (device, inode) of node `id`'s backing file, while it is known.
    pub fn backing(&self, id: u64) -> Option<(u64, u64)> {
        self.nodes
            .get(&id)
            .and_then(|n| n.backing)
            .map(|b| (b.dev, b.ino))
    }

    /// How many nodes the kernel holds.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Takes a lookup reference on the node for the file `st`, reached as
    /// `path` in `store`, creating the node if needed.
    pub fn intern(&mut self, store: Store, path: &[u8], st: &Stat) -> u64 {
        let key = Backing::of(store, st);
        if let Some(&id) = self.by_backing.get(&key) {
            if let Some(n) = self.nodes.get_mut(&id) {
                n.nlookup += 1;
                remember(&mut n.paths, path);
                return id;
            }
        }
        let id = if st.st_ino > 1 && !self.nodes.contains_key(&st.st_ino) {
            st.st_ino
        } else {
            while self.nodes.contains_key(&self.next) {
                self.next += 1;
            }
            self.next
        };
        self.nodes.insert(
            id,
            Node {
                store,
                paths: vec![path.to_vec()],
                nlookup: 1,
                backing: Some(key),
            },
        );
        self.by_backing.insert(key, id);
        id
    }

    /// The number a listing shows for the file `st`: its node's, else the
    /// backing inode number it will most likely get.
    pub fn ino_for(&self, store: Store, st: &Stat) -> u64 {
        self.by_backing
            .get(&Backing::of(store, st))
            .copied()
            .unwrap_or(st.st_ino)
    }

    /// Gives back `n` lookup references on `id`; the node goes with the
    /// last one.
    pub fn forget(&mut self, id: u64, n: u64) {
        if id == 1 {
            return;
        }
        let gone = match self.nodes.get_mut(&id) {
            Some(node) => {
                node.nlookup = node.nlookup.saturating_sub(n);
                node.nlookup == 0
            }
            None => false,
        };
        if gone {
            if let Some(node) = self.nodes.remove(&id) {
                if let Some(b) = node.backing {
                    if self.by_backing.get(&b) == Some(&id) {
                        self.by_backing.remove(&b);
                    }
                }
            }
        }
    }

    /// Records that the name `path` in `store`, which was the file `st`,
    /// is gone. The file's node forgets that name; if it was the file's
    /// last name (or a directory's only one), the node is dead: its
    /// identity is released so that a new file with the same inode number
    /// gets a node of its own.
    pub fn removed(&mut self, store: Store, path: &[u8], st: &Stat) {
        let key = Backing::of(store, st);
        let Some(&id) = self.by_backing.get(&key) else {
            return;
        };
        let last = st.st_nlink <= 1 || key.fmt == libc::S_IFDIR;
        if let Some(n) = self.nodes.get_mut(&id) {
            if n.paths.len() > 1 {
                n.paths.retain(|p| p != path);
            }
            if last {
                n.backing = None;
                self.by_backing.remove(&key);
            }
        }
    }

    /// Renames every remembered name at or beneath `from` in `store` to
    /// the same name beneath `to`.
    pub fn moved(&mut self, store: Store, from: &[u8], to: &[u8]) {
        for n in self.nodes.values_mut() {
            if n.store != store {
                continue;
            }
            for p in n.paths.iter_mut() {
                let under = *p == from
                    || (p.len() > from.len() && p.starts_with(from) && p[from.len()] == b'/');
                if under {
                    let mut q = to.to_vec();
                    q.extend_from_slice(&p[from.len()..]);
                    *p = q;
                }
            }
        }
    }
}

fn remember(paths: &mut Vec<Vec<u8>>, path: &[u8]) {
    if paths.first().map(|p| p.as_slice()) == Some(path) {
        return;
    }
    paths.retain(|p| p != path);
    paths.insert(0, path.to_vec());
    paths.truncate(MAX_ALIASES);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(ino: u64, nlink: u64, fmt: u32) -> Stat {
        // SAFETY: `Stat` is a plain C struct of integers; all-zero bytes
        // are a valid value.
        let mut s: Stat = unsafe { std::mem::zeroed() };
        s.st_dev = 7;
        s.st_ino = ino;
        s.st_nlink = nlink as _;
        s.st_mode = fmt | 0o644;
        s
    }

    #[test]
    fn hard_links_are_one_node_with_the_backing_number() {
        let mut t = Table::new();
        let f = t.intern(Store::Host, b"f", &st(40, 2, libc::S_IFREG));
        let g = t.intern(Store::Host, b"g", &st(40, 2, libc::S_IFREG));
        assert_eq!(f, 40);
        assert_eq!(f, g);
        assert_eq!(t.get(f).unwrap().1, b"g");
        // Removing one name leaves the other usable.
        t.removed(Store::Host, b"g", &st(40, 2, libc::S_IFREG));
        assert_eq!(t.get(f).unwrap().1, b"f");
        assert_eq!(t.intern(Store::Host, b"f", &st(40, 1, libc::S_IFREG)), f);
    }

    #[test]
    fn a_reused_inode_number_after_removal_is_a_new_node() {
        let mut t = Table::new();
        let old = t.intern(Store::Host, b"r", &st(50, 2, libc::S_IFDIR));
        t.removed(Store::Host, b"r", &st(50, 2, libc::S_IFDIR));
        let new = t.intern(Store::Host, b"r", &st(50, 2, libc::S_IFDIR));
        assert_ne!(old, new, "the kernel still holds the dead directory");
        assert!(new >= 1 << 62);
        t.forget(old, 1);
        assert!(t.get(old).is_none());
        assert_eq!(t.get(new).unwrap().1, b"r");
    }

    #[test]
    fn renames_keep_the_node_and_move_names_beneath() {
        let mut t = Table::new();
        let d = t.intern(Store::Host, b"a", &st(60, 2, libc::S_IFDIR));
        let f = t.intern(Store::Host, b"a/x", &st(61, 1, libc::S_IFREG));
        let other = t.intern(Store::Host, b"ab/x", &st(62, 1, libc::S_IFREG));
        t.moved(Store::Host, b"a", b"b/c");
        assert_eq!(t.get(d).unwrap().1, b"b/c");
        assert_eq!(t.get(f).unwrap().1, b"b/c/x");
        assert_eq!(t.get(other).unwrap().1, b"ab/x");
        assert_eq!(
            t.intern(Store::Host, b"b/c/x", &st(61, 1, libc::S_IFREG)),
            f
        );
    }

    #[test]
    fn forget_drops_the_node_after_the_last_reference() {
        let mut t = Table::new();
        let f = t.intern(Store::State, b"f", &st(70, 1, libc::S_IFREG));
        t.intern(Store::State, b"f", &st(70, 1, libc::S_IFREG));
        t.forget(f, 1);
        assert!(t.get(f).is_some());
        t.forget(f, 1);
        assert!(t.get(f).is_none());
        assert_eq!(t.len(), 1);
        // The same file in the other store is another node.
        let h = t.intern(Store::Host, b"f", &st(70, 1, libc::S_IFREG));
        let s = t.intern(Store::State, b"f", &st(70, 1, libc::S_IFREG));
        assert_ne!(h, s);
    }
}
