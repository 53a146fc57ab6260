//! The one poison-tolerant lock: a thread that panicked while holding a
//! mutex leaves its data as it was, and the binaries' shared state (logs,
//! tables of pending requests) stays usable rather than taking every
//! other thread down with it.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking the data over if a panicking thread poisoned it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
