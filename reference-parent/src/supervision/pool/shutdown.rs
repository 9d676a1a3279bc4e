//! What a pool's shutdown did ([`ShutdownReport`]), built the same way by
//! every pool driver (DESIGN §17.7).

use std::time::Duration;

use super::Closed;

/// What a shutdown did ([`PluginHost::shutdown`](crate::lifecycle::PluginHost::shutdown),
/// [`WorkerPool::shutdown`](crate::lifecycle::WorkerPool::shutdown), and the
/// async pool's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Idle workers closed (input closed, exit awaited, group killed, reaped).
    pub retired: usize,
    /// Busy members whose request was cancelled (their workers were killed
    /// and reaped by the calls that held them).
    pub cancelled: usize,
    /// Busy members that had not come back when the bound passed. Their
    /// callers still hold them; each worker is killed and reaped when its
    /// call returns.
    pub still_busy: usize,
    /// Workers that did not exit cleanly by themselves, and other cleanup
    /// problems, one sentence each.
    pub problems: Vec<String>,
    /// Warm spares closed.
    pub spares_retired: usize,
    /// How long shutdown took.
    pub elapsed: Duration,
}

impl ShutdownReport {
    /// Whether every worker was accounted for in time without problems.
    pub fn is_clean(&self) -> bool {
        self.still_busy == 0 && self.problems.is_empty()
    }

    /// The report of a close so far, and the workers the driver must end
    /// (idle workers first, then spares).
    pub(crate) fn of_close<W>(closed: Closed<W>) -> (Self, Vec<W>) {
        let report = Self {
            retired: closed.idle.len(),
            cancelled: if closed.first { closed.busy } else { 0 },
            spares_retired: closed.spares.len(),
            ..Self::default()
        };
        let mut workers = closed.idle;
        workers.extend(closed.spares);
        (report, workers)
    }

    /// `still_busy` members had not come back within `bound`.
    pub(crate) fn busy_left(&mut self, name: &str, still_busy: usize, bound: Duration) {
        self.still_busy = still_busy;
        if still_busy > 0 {
            self.problems.push(format!(
                "{name}: {still_busy} busy member(s) did not return within {} ms; each worker is killed and reaped when its call returns",
                bound.as_millis()
            ));
        }
    }
}
