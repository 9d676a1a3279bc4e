//! Tests of one binary that must not overlap (they use both cores or are
//! timing-sensitive) take one lock: a test that panicked while holding it
//! does not stop the others.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Hold `lock` until the guard drops, whether or not an earlier holder
/// panicked.
pub fn one_at_a_time(lock: &'static Mutex<()>) -> MutexGuard<'static, ()> {
    lock.lock().unwrap_or_else(PoisonError::into_inner)
}
