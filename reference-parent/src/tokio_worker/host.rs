//! [`ContainedHost`]: the configured process host (DESIGN §16: grants,
//! cgroup or process-group containment, Landlock, output truncation, the
//! per-call deadline) for tokio.
//!
//! A command runs on `spawn_blocking` (the process host's one `ppoll`
//! wait); the returned future owns it: dropping the future (a deadline, a
//! `select!` that lost) fires a token the command's wait watches, and the
//! command's whole tree is killed and reaped at once. Inside a worker's
//! request the same wait also watches the worker's pidfd, so a worker that
//! dies while its host command runs stops the command too (DESIGN §17.6).

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use ::tokio::task::spawn_blocking;
use quirl_lua_protocol::records::{ErrorCode, HostCall, ShellError};

use crate::cancel::{Cancel, CancelSignal, WatchedCancel};
use crate::process_host::{ProcessHostConfig, run_host_call};
use crate::supervision::exchange::HostAnswer;

/// The configured process host, for async hosts: what a host function is
/// handed to run the calls it does not answer itself.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::{Duration, Instant};
/// use quirl_lua_reference_parent::Cancel;
/// use quirl_lua_reference_parent::process_host::{Environment, Grants, ProcessAccess, ProcessHostConfig};
/// use quirl_lua_reference_parent::tokio_worker::ContainedHost;
/// use quirl_lua_protocol::records::HostCall;
///
/// let config = ProcessHostConfig::new(
///     ProcessAccess { allow_process: true, process_enabled: true },
///     Grants::parse(["process.spawn:echo"])?,
///     Environment::from_parent(),
///     "/",
/// )?;
/// let host = ContainedHost::new(config, Instant::now() + Duration::from_secs(1), Cancel::new());
/// let call = HostCall {
///     request_id: 1,
///     call_id: 1,
///     command: "echo hi".to_owned(),
///     deadline_ms: 1_000,
///     max_output_bytes: 1024,
/// };
/// let outcome = host.run(&call).await?;
/// assert_eq!(outcome.stdout.as_deref(), Some("hi\n"));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ContainedHost {
    config: ProcessHostConfig,
    deadline: Instant,
    cancel: Cancel,
    /// The pidfd of the worker the calls come from, if any.
    worker_exit: Option<Arc<OwnedFd>>,
}

impl ContainedHost {
    /// Run calls with `config`, each until the earlier of its own
    /// `deadline_ms` and `deadline` (DESIGN §16.6), stopped when `cancel`
    /// fires.
    pub fn new(config: ProcessHostConfig, deadline: Instant, cancel: Cancel) -> Self {
        Self {
            config,
            deadline,
            cancel,
            worker_exit: None,
        }
    }

    /// The same, watching the worker's pidfd as well.
    pub(super) fn for_worker(
        config: ProcessHostConfig,
        deadline: Instant,
        cancel: Cancel,
        worker_exit: Option<OwnedFd>,
    ) -> Self {
        Self {
            config,
            deadline,
            cancel,
            worker_exit: worker_exit.map(Arc::new),
        }
    }

    /// The request deadline the calls run under.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Run one host call: checked against the grants, run contained, its
    /// output truncated, its tree killed at its deadline. Every failure (a
    /// denial included) is the answer's error record, for the guest.
    // The error record is the wire's own type (SPEC §6.9), as in the
    // protocol crate's host callbacks.
    #[allow(clippy::result_large_err)]
    pub async fn run(&self, call: &HostCall) -> HostAnswer {
        // Fired when this future is dropped: the command's wait ends and
        // its tree is killed.
        let dropped = DropCancels(Cancel::new());
        let stop = dropped.0.clone();
        let config = self.config.clone();
        let call = call.clone();
        let deadline = self.deadline;
        let cancel = self.cancel.clone();
        let exit = self.worker_exit.clone();
        let task = spawn_blocking(move || {
            let mut also = Vec::new();
            if let Some(fd) = stop.wake_fd() {
                also.push(fd);
            }
            if let Some(fd) = exit.as_deref() {
                also.push(fd.as_fd());
            }
            match WatchedCancel::new(&cancel, &also) {
                Ok(signal) => run_host_call(&config, &call, deadline, &signal).result,
                Err(_) => run_host_call(&config, &call, deadline, &cancel).result,
            }
        });
        let answer = match task.await {
            Ok(answer) => answer,
            Err(error) => Err(ShellError::new(
                ErrorCode::ProcessSpawn,
                format!("the host command's task failed: {error}"),
            )),
        };
        drop(dropped);
        answer
    }
}

/// Cancels its token when dropped.
struct DropCancels(Cancel);

impl Drop for DropCancels {
    fn drop(&mut self) {
        self.0.cancel();
    }
}
