//! One worker slot's life (DESIGN §17.4): whether a worker process is
//! live, why the last one ended, when one must be retired, and what a
//! fresh one is given — the decisions behind every `Worker` handle.
//!
//! A slot runs one worker process at a time. A request that ends it (a
//! deadline, a cancellation, a crash, a violation) or a tripped limit
//! after which it retires (SPEC §13.1) leaves the slot without a
//! process; the next request starts a fresh one from the same
//! configuration and loads the plugin the slot served again, so that no
//! request is ever sent into a worker that ended. A worker found dead
//! between requests (killed from outside, or a worker that retired on its
//! own) is replaced the same way before anything is sent, and recorded.

use quirl_lua_protocol::records::{OperationResult, PluginRegistrations};

use super::classify::{self, WorkerEnd};
use super::flight::Flight;
use crate::callback_deadline::CallbackDeadlines;
use crate::error::{Error, ErrorClass};

/// What a fresh worker of a slot is given after `initialize`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Program {
    /// Nothing: a plain worker.
    #[default]
    Bare,
    /// A plugin, loaded with `load_plugin`.
    Plugin { source: String, source_name: String },
}

/// What the driver does with a worker after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterAnswer {
    /// Keep serving on it.
    Keep,
    /// Retire it now (end its input, let it exit, kill and reap what is
    /// left): its limit tripped, and a VM whose limit tripped is never
    /// reused (SPEC §13.1, DESIGN §17.4).
    Retire,
}

/// How a worker found ended between requests had ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FoundEnded {
    /// It exited 0 after answering `resource_limit`: it retired its VM on
    /// purpose (SPEC §13.1-a). Not a failure.
    Retired,
    /// It died in any other way: a failure of the worker.
    Died,
}

/// One slot's state.
#[derive(Debug, Default)]
pub(crate) struct Life {
    pid: Option<u32>,
    live: bool,
    /// Why the last process ended (class and message).
    ended_by: Option<(ErrorClass, String)>,
    /// Fresh workers started after the first.
    restarts: u64,
    /// Workers found dead between requests (not counting retirements).
    found_dead: u64,
    /// Workers found retired between requests (they exited 0 after a
    /// `resource_limit` answer that named no limit, SPEC §13.1-a).
    found_retired: u64,
    /// Why the last restart was needed.
    last_restart_cause: Option<Error>,
    program: Program,
    callbacks: CallbackDeadlines,
    /// Set while a request is in flight; still set when the next call
    /// begins, the previous call was dropped mid-request.
    in_flight: Option<Flight>,
}

impl Life {
    /// Whether the next request must start a fresh worker first.
    pub(crate) fn needs_start(&self) -> bool {
        !self.live
    }

    /// Whether a live worker is there.
    pub(crate) fn is_live(&self) -> bool {
        self.live
    }

    /// A fresh worker `pid` is live (initialized, its program loaded).
    pub(crate) fn started(&mut self, pid: u32) {
        if self.pid.is_some() {
            self.restarts += 1;
        }
        self.pid = Some(pid);
        self.live = true;
        self.ended_by = None;
    }

    /// The current (or last) worker's pid; 0 before the first start.
    pub(crate) fn pid(&self) -> u32 {
        self.pid.unwrap_or(0)
    }

    /// Fresh workers started after the first one.
    pub(crate) fn restarts(&self) -> u64 {
        self.restarts
    }

    /// Workers found dead between requests.
    pub(crate) fn found_dead(&self) -> u64 {
        self.found_dead
    }

    /// Workers found retired between requests.
    pub(crate) fn found_retired(&self) -> u64 {
        self.found_retired
    }

    /// Why the last restart was needed.
    pub(crate) fn last_restart_cause(&self) -> Option<&Error> {
        self.last_restart_cause.as_ref()
    }

    /// Why the last worker ended, while none is live.
    pub(crate) fn ended_by(&self) -> Option<&(ErrorClass, String)> {
        self.ended_by.as_ref()
    }

    /// A request is on its way.
    pub(crate) fn begin(&mut self, flight: Flight) {
        self.in_flight = Some(flight);
    }

    /// The request's call returned (with whatever result).
    pub(crate) fn finish(&mut self) {
        self.in_flight = None;
    }

    /// The request of a call that was dropped before it returned, if the
    /// last one was: its worker was killed when the call was dropped.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn take_abandoned(&mut self) -> Option<Flight> {
        self.in_flight.take()
    }

    /// Decide what happens to the worker after its answer.
    pub(crate) fn after_answer(answer: &Result<OperationResult, Error>) -> AfterAnswer {
        match answer {
            Err(error) if error.class() == ErrorClass::Limit => AfterAnswer::Retire,
            _ => AfterAnswer::Keep,
        }
    }

    /// The worker ended with `error` (a failure, or a retirement after a
    /// tripped limit): the next request starts a fresh one.
    pub(crate) fn ended(&mut self, error: &Error) {
        self.live = false;
        self.ended_by = Some((error.class(), error.message().to_owned()));
        self.last_restart_cause = Some(error.clone());
    }

    /// The live worker was found ended before a request was sent:
    /// recorded, and replaced before anything is sent.
    pub(crate) fn found_ended(&mut self, how: FoundEnded, cause: Error) {
        match how {
            FoundEnded::Died => self.found_dead += 1,
            FoundEnded::Retired => self.found_retired += 1,
        }
        self.ended(&cause);
    }

    /// The live worker `pid` was found ended before a request was sent and
    /// has been ended (`end`): a retirement (`retired`: it exited 0 after a
    /// `resource_limit` answer, SPEC §13.1-b) or a death, recorded with
    /// what ending it showed; the next request starts a fresh worker.
    pub(crate) fn found_ended_before_request(&mut self, retired: bool, pid: u32, end: WorkerEnd) {
        let how = if retired {
            FoundEnded::Retired
        } else {
            FoundEnded::Died
        };
        let cause = classify::with_end(classify::found_ended(retired), pid, end);
        self.found_ended(how, cause);
    }

    /// The live worker `pid` was found ended between calls and has been
    /// ended (`end`): a retirement when it may have retired after its last
    /// answer (`may_have_retired`, SPEC §13.1-a) and exited 0 by itself
    /// (§13.1-b), otherwise a death.
    pub(crate) fn found_ended_between_calls(
        &mut self,
        may_have_retired: bool,
        pid: u32,
        end: WorkerEnd,
    ) {
        let retired = may_have_retired && end.exited_zero;
        self.found_ended_before_request(retired, pid, end);
    }

    /// The slot serves this plugin from now on: a fresh worker loads it.
    pub(crate) fn loaded_plugin(
        &mut self,
        source: &str,
        source_name: &str,
        registrations: &PluginRegistrations,
    ) {
        self.program = Program::Plugin {
            source: source.to_owned(),
            source_name: source_name.to_owned(),
        };
        self.callbacks = CallbackDeadlines::new(registrations);
    }

    /// What a fresh worker is given after `initialize`.
    pub(crate) fn program(&self) -> &Program {
        &self.program
    }

    /// The callback deadlines of the plugin the slot serves.
    pub(crate) fn callbacks(&self) -> &CallbackDeadlines {
        &self.callbacks
    }
}

/// The accessors every worker driver offers (the blocking [`crate::Worker`]
/// and the tokio one), written once: they read the driver's `config`,
/// `cancel`, `life` and `cgroup_contained` fields.
macro_rules! slot_accessors {
    () => {
        /// A clone of the token that cancels this worker's requests.
        ///
        /// Cancelling kills the worker mid-request (like a missed
        /// deadline); the token stays cancelled, so no fresh worker is
        /// started under it either: every later call fails as cancelled.
        pub fn cancel_token(&self) -> $crate::cancel::Cancel {
            self.cancel.clone()
        }

        /// The current (or last) worker's process id (also its
        /// process-group and session id).
        pub fn pid(&self) -> u32 {
            self.life.pid()
        }

        /// `cgroup` when the worker runs in a cgroup of its own, otherwise
        /// `process-group` (DESIGN §17.2–17.3).
        pub fn containment_mode(&self) -> &'static str {
            $crate::cgroup::Containment::in_effect(self.cgroup_contained).as_str()
        }

        /// Fresh workers started after the first one (restarts).
        pub fn restarts(&self) -> u64 {
            self.life.restarts()
        }

        /// Workers found dead before a request was sent (killed from
        /// outside, or crashed between calls); each was replaced before the
        /// request.
        pub fn found_dead(&self) -> u64 {
            self.life.found_dead()
        }

        /// Why the last worker ended: the cause of the next (or last)
        /// restart.
        pub fn last_restart_cause(&self) -> Option<&$crate::Error> {
            self.life.last_restart_cause()
        }

        /// The policy the worker was initialized with.
        pub fn policy(&self) -> $crate::Policy {
            self.config.policy()
        }

        /// The configuration fresh workers are started from.
        pub fn config(&self) -> &$crate::WorkerConfig {
            &self.config
        }
    };
}
pub(crate) use slot_accessors;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::supervision::classify::answered;
    use quirl_lua_protocol::records::{ErrorCode, ShellError};

    fn limit() -> Error {
        answered(
            ShellError::new(ErrorCode::ResourceLimit, "out of instructions")
                .with_context("limit: instructions"),
        )
    }

    // SPEC §13.1, DESIGN §17.4: a limit trip retires the worker; a guest
    // error does not.
    #[test]
    fn only_a_tripped_limit_retires_a_worker() {
        assert_eq!(Life::after_answer(&Err(limit())), AfterAnswer::Retire);
        let guest = answered(ShellError::new(ErrorCode::Lua, "boom"));
        assert_eq!(Life::after_answer(&Err(guest)), AfterAnswer::Keep);
        assert_eq!(
            Life::after_answer(&Ok(OperationResult::Null)),
            AfterAnswer::Keep
        );
    }

    #[test]
    fn an_ended_worker_is_replaced_before_the_next_request() {
        let mut life = Life::default();
        assert!(life.needs_start());
        life.started(10);
        assert!(!life.needs_start());
        life.ended(&limit());
        assert!(life.needs_start());
        assert_eq!(
            life.ended_by().map(|(class, _)| *class),
            Some(ErrorClass::Limit)
        );
        life.started(11);
        assert_eq!((life.pid(), life.restarts(), life.found_dead()), (11, 1, 0));
        assert!(life.ended_by().is_none());
        assert_eq!(
            life.last_restart_cause().map(Error::class),
            Some(ErrorClass::Limit)
        );
    }

    #[test]
    fn a_worker_found_dead_counts_and_a_retired_one_does_not() {
        let mut life = Life::default();
        life.started(1);
        let crash = Error::new(ErrorClass::WorkerCrashed, ErrorCode::Lua, "gone");
        life.found_ended(FoundEnded::Died, crash);
        life.started(2);
        life.found_ended(FoundEnded::Retired, limit());
        life.started(3);
        assert_eq!(
            (life.restarts(), life.found_dead(), life.found_retired()),
            (2, 1, 1)
        );
    }

    // SPEC §13.1-b: found ended between calls, a worker that may have
    // retired and exited 0 retired; any other end is a death.
    #[test]
    fn between_calls_only_a_clean_exit_after_a_limit_is_a_retirement() {
        let end = |exited_zero| WorkerEnd {
            status: Some("exited".to_owned()),
            exited_zero,
            problems: Vec::new(),
        };
        let mut life = Life::default();
        life.started(1);
        life.found_ended_between_calls(true, 1, end(true));
        life.started(2);
        life.found_ended_between_calls(true, 2, end(false));
        life.started(3);
        life.found_ended_between_calls(false, 3, end(true));
        life.started(4);
        assert_eq!((life.found_retired(), life.found_dead()), (1, 2));
        assert_eq!(
            life.last_restart_cause().map(Error::class),
            Some(ErrorClass::WorkerCrashed)
        );
    }

    #[test]
    fn a_plugin_is_remembered_for_fresh_workers() {
        let mut life = Life::default();
        life.loaded_plugin("return 1", "p.lua", &PluginRegistrations::default());
        assert_eq!(
            life.program(),
            &Program::Plugin {
                source: "return 1".into(),
                source_name: "p.lua".into()
            }
        );
    }
}
