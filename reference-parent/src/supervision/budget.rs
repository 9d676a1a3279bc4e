//! The restart budget: how many worker failures a plugin may have before it
//! is quarantined.
//!
//! Pure bookkeeping, handed the time by its caller: no clock, no I/O, so
//! every rule is testable with made-up instants. The rules themselves are
//! documented once, in the [lifecycle module](crate::lifecycle) (DESIGN
//! §17.7).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What the caller must do after a failure was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Within budget: replace the failed worker on its next use.
    Restart,
    /// Budget spent: quarantine the plugin.
    Quarantine,
}

/// Failures inside the forgiveness window, against a maximum.
#[derive(Debug, Clone)]
pub(crate) struct RestartBudget {
    max_restarts: u32,
    window: Option<Duration>,
    /// Instants of the failures still inside the window, oldest first.
    /// Never longer than `max_restarts + 1`.
    failures: VecDeque<Instant>,
}

impl RestartBudget {
    pub(crate) fn new(max_restarts: u32, window: Option<Duration>) -> Self {
        Self {
            max_restarts,
            window,
            failures: VecDeque::new(),
        }
    }

    /// Record one failure at `now` and decide.
    ///
    /// The failure is quarantining when, after forgetting failures older
    /// than the window, more than `max_restarts` failures remain.
    pub(crate) fn record_failure(&mut self, now: Instant) -> Verdict {
        self.forget_before(now);
        self.failures.push_back(now);
        let limit = usize::try_from(self.max_restarts).unwrap_or(usize::MAX);
        if self.failures.len() > limit {
            // Keep the list bounded; the quarantine is sticky anyway.
            while self.failures.len() > limit.saturating_add(1) {
                self.failures.pop_front();
            }
            Verdict::Quarantine
        } else {
            Verdict::Restart
        }
    }

    /// Failures that still count at `now`.
    pub(crate) fn failures_in_window(&self, now: Instant) -> usize {
        match self.window {
            None => self.failures.len(),
            Some(window) => self
                .failures
                .iter()
                .filter(|at| now.saturating_duration_since(**at) < window)
                .count(),
        }
    }

    /// Forget every failure (an explicit reset).
    pub(crate) fn clear(&mut self) {
        self.failures.clear();
    }

    pub(crate) fn max_restarts(&self) -> u32 {
        self.max_restarts
    }

    pub(crate) fn window(&self) -> Option<Duration> {
        self.window
    }

    fn forget_before(&mut self, now: Instant) {
        let Some(window) = self.window else {
            return;
        };
        while let Some(oldest) = self.failures.front() {
            if now.saturating_duration_since(*oldest) >= window {
                self.failures.pop_front();
            } else {
                break;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn quarantines_on_the_failure_after_max_restarts() {
        let start = Instant::now();
        let mut budget = RestartBudget::new(3, Some(MINUTE));
        let verdicts: Vec<Verdict> = (0..4)
            .map(|i| budget.record_failure(start + Duration::from_millis(i)))
            .collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Restart,
                Verdict::Restart,
                Verdict::Restart,
                Verdict::Quarantine
            ]
        );
    }

    #[test]
    fn zero_restarts_quarantines_on_the_first_failure() {
        let mut budget = RestartBudget::new(0, Some(MINUTE));
        assert_eq!(budget.record_failure(Instant::now()), Verdict::Quarantine);
    }

    #[test]
    fn failures_older_than_the_window_are_forgiven() {
        let start = Instant::now();
        let mut budget = RestartBudget::new(2, Some(MINUTE));
        assert_eq!(budget.record_failure(start), Verdict::Restart);
        assert_eq!(
            budget.record_failure(start + Duration::from_secs(10)),
            Verdict::Restart
        );
        // The first failure is exactly one window old: forgotten.
        assert_eq!(budget.record_failure(start + MINUTE), Verdict::Restart);
        assert_eq!(budget.failures_in_window(start + MINUTE), 2);
        // Three inside one window: quarantine.
        assert_eq!(
            budget.record_failure(start + MINUTE + Duration::from_secs(1)),
            Verdict::Quarantine
        );
    }

    #[test]
    fn without_a_window_nothing_is_forgiven() {
        let start = Instant::now();
        let mut budget = RestartBudget::new(1, None);
        assert_eq!(budget.record_failure(start), Verdict::Restart);
        let much_later = start + Duration::from_secs(365 * 24 * 3600);
        assert_eq!(budget.record_failure(much_later), Verdict::Quarantine);
    }

    #[test]
    fn clear_forgets_everything() {
        let start = Instant::now();
        let mut budget = RestartBudget::new(1, None);
        budget.record_failure(start);
        budget.clear();
        assert_eq!(budget.failures_in_window(start), 0);
        assert_eq!(budget.record_failure(start), Verdict::Restart);
    }

    #[test]
    fn the_failure_list_stays_bounded() {
        let start = Instant::now();
        let mut budget = RestartBudget::new(2, None);
        for i in 0..1000 {
            budget.record_failure(start + Duration::from_millis(i));
        }
        assert_eq!(budget.failures_in_window(start), 3);
    }
}
