//! The request in flight: its id, operation, when it started and its
//! absolute deadline (SPEC §10; DESIGN §17.6).

use std::time::{Duration, Instant};

/// One request on its way through a worker, for deadlines and error
/// context. Plain data: the time is the caller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flight {
    pub(crate) id: u64,
    pub(crate) operation: &'static str,
    pub(crate) started: Instant,
    pub(crate) deadline: Instant,
}

impl Flight {
    /// `request ID (OPERATION)`, as error contexts name it.
    pub(crate) fn describe(&self) -> String {
        format!("request {} ({})", self.id, self.operation)
    }

    /// How long the request was given.
    pub(crate) fn budget(&self) -> Duration {
        self.deadline.saturating_duration_since(self.started)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flight_names_its_request_and_budget() {
        let started = Instant::now();
        let flight = Flight {
            id: 3,
            operation: "eval",
            started,
            deadline: started + Duration::from_millis(200),
        };
        assert_eq!(flight.describe(), "request 3 (eval)");
        assert_eq!(flight.budget(), Duration::from_millis(200));
    }
}
