//! The async worker's process on tokio: spawning it and wrapping its pipes
//! (DESIGN §17.2), watching its pidfd and the cancellation token while a
//! request is in flight (DESIGN §17.3), and the kill → reap → drain that
//! ends it (SPEC §13.2, DESIGN §17.4) — the blocking machinery of
//! `crate::child_process`, run on `spawn_blocking`.

use std::process::ExitStatus;
use std::time::Instant;

use ::tokio::io::AsyncReadExt;
use ::tokio::process::{ChildStderr, ChildStdin};
use ::tokio::task::spawn_blocking;
use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::ErrorCode;
use quirl_lua_protocol::tokio_io::ParentClient;

use super::Live;
use crate::child_process::worker_kill::{Termination, WorkerProcess};
use crate::child_process::worker_spawn;
use crate::error::{Error, ErrorClass};
use crate::process_host::Cancel;
use crate::worker::{PIPE_RELEASE_WAIT, WorkerConfig};

/// What ended a [`Watcher`]'s wait.
#[derive(Debug, Clone, Copy)]
pub(super) enum Watched {
    /// The worker's cancellation token fired.
    Cancelled,
    /// The worker process exited (its pidfd became readable).
    Exited,
}

/// The wait of the blocking worker for a request's other ends (SPEC §17.1,
/// §17.3): one `ppoll` over the worker's pidfd and the cancellation
/// token's eventfd, on `spawn_blocking`, until the request's deadline. The
/// task also polls the read end of a pipe whose write end this value
/// holds: dropping it (the request ended, or its future was dropped)
/// closes that end and the task ends at once.
pub(super) struct Watcher {
    task: ::tokio::task::JoinHandle<Option<Watched>>,
    _stop: std::os::fd::OwnedFd,
}

impl Watcher {
    /// `None` when there is nothing to watch (no pidfd, no eventfd) or no
    /// descriptor for the stop pipe: the request then ends at its deadline.
    pub(super) fn start(
        process: &WorkerProcess,
        cancel: &Cancel,
        deadline: Instant,
    ) -> Option<Self> {
        let exit = process
            .exit_fd()
            .and_then(|fd| fd.try_clone_to_owned().ok());
        let wake = cancel.register().ok();
        if exit.is_none() && wake.is_none() {
            return None;
        }
        let (stop_read, stop) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?;
        let cancel = cancel.clone();
        let task = spawn_blocking(move || {
            use crate::child_process::poll::{PollFlags, fired, interest, wait_until};
            use std::os::fd::AsFd;
            let mut fds = vec![interest(stop_read.as_fd(), PollFlags::IN)];
            fds.extend(exit.iter().map(|fd| interest(fd.as_fd(), PollFlags::IN)));
            fds.extend(wake.iter().map(|fd| interest(fd.as_fd(), PollFlags::IN)));
            let exit_slot = exit.as_ref().map(|_| 1);
            loop {
                if cancel.is_cancelled() {
                    return Some(Watched::Cancelled);
                }
                match wait_until(&mut fds, deadline) {
                    Ok(true) => {}
                    // The deadline passed (the request's own timer reports
                    // it) or the wait failed: nothing more to watch.
                    _ => return None,
                }
                if fds.first().is_some_and(|slot| fired(slot, PollFlags::IN)) {
                    return None;
                }
                if cancel.is_cancelled() {
                    return Some(Watched::Cancelled);
                }
                if exit_slot
                    .and_then(|slot| fds.get(slot))
                    .is_some_and(|slot| fired(slot, PollFlags::IN))
                {
                    return Some(Watched::Exited);
                }
            }
        });
        Some(Self { task, _stop: stop })
    }

    /// What ended the wait; pending forever if it ended with nothing to
    /// report (the deadline is the request's own timer).
    pub(super) async fn wait(&mut self) -> Watched {
        match (&mut self.task).await {
            Ok(Some(watched)) => watched,
            _ => std::future::pending().await,
        }
    }
}

/// Spawn the worker on `spawn_blocking` and wrap its pipes for tokio.
pub(super) async fn start(
    config: &WorkerConfig,
) -> Result<(WorkerProcess, ParentClient<ChildStderr, ChildStdin>, bool), Error> {
    let spawn_failed = |command: &str, why: String| {
        Error::new(
            ErrorClass::Spawn,
            ErrorCode::ProcessSpawn,
            "could not start the Lua worker",
        )
        .with_context(format!("worker command `{command}`: {why}"))
        .with_help("check the worker command (--worker or QUIRL_LUA_WORKER)")
    };
    let command = config.command.to_string();
    let owned = config.clone();
    // If this future is dropped, the task still ends: a worker it started
    // is dropped there, which kills and reaps it.
    let spawned = spawn_blocking(move || {
        let cgroup = owned.worker_cgroup()?;
        let contained = cgroup.is_some();
        worker_spawn::spawn(&owned.command, &owned.limits, cgroup)
            .map(|spawned| (spawned, contained))
            .map_err(|error| spawn_failed(&owned.command.to_string(), error.to_string()))
    })
    .await
    .map_err(|error| spawn_failed(&command, format!("the spawning task failed: {error}")))??;
    let (spawned, contained) = spawned;
    let pipes =
        ChildStdin::from_std(std::process::ChildStdin::from(spawned.input)).and_then(|stdin| {
            ChildStderr::from_std(std::process::ChildStderr::from(spawned.output))
                .map(|stderr| (stdin, stderr))
        });
    match pipes {
        Ok((stdin, stderr)) => Ok((spawned.process, ParentClient::new(stderr, stdin), contained)),
        Err(error) => {
            let termination = kill_and_reap(spawned.process).await;
            let mut failure = spawn_failed(
                &command,
                format!("registering its pipes with tokio failed: {error}"),
            );
            for problem in termination.problems {
                failure = failure.with_context(format!("cleanup: {problem}"));
            }
            Err(failure)
        }
    }
}

/// Wait, on `spawn_blocking`, until the worker process exits (its pidfd
/// is readable) or `until` passes; whether it exited (`false` without a
/// pidfd). Reaps nothing.
pub(super) async fn exited_by(process: &WorkerProcess, until: Instant) -> bool {
    let Some(pidfd) = process
        .exit_fd()
        .and_then(|fd| fd.try_clone_to_owned().ok())
    else {
        return false;
    };
    spawn_blocking(move || {
        use crate::child_process::poll::{PollFlags, interest, wait_until};
        use std::os::fd::AsFd;
        let mut fds = [interest(pidfd.as_fd(), PollFlags::IN)];
        matches!(wait_until(&mut fds, until), Ok(true))
    })
    .await
    .unwrap_or(false)
}

/// The blocking worker's kill and reap (DESIGN §17.4 steps 2–5), on
/// `spawn_blocking`: it waits on the worker's pidfd for the kill to land.
/// The task owns the process, so it finishes even if this future is
/// dropped.
pub(super) async fn kill_and_reap(mut process: WorkerProcess) -> Termination {
    spawn_blocking(move || process.kill_tree_and_reap())
        .await
        .unwrap_or_else(|error| Termination {
            status: None,
            problems: vec![format!("the kill-and-reap task failed: {error}")],
        })
}

/// Close stdin, kill the tree, reap, then drain the output until end of
/// file, which proves no process of the tree still holds it (SPEC §13.2).
pub(super) async fn retire(live: Live) -> (Option<ExitStatus>, Vec<String>) {
    let Live {
        client, process, ..
    } = live;
    let (_, mut output, input) = client.into_parts();
    drop(input);
    let termination = kill_and_reap(process).await;
    let mut problems = termination.problems;
    let mut sink = vec![0; 16 * 1024];
    let drain = async {
        loop {
            if output.read(&mut sink).await? == 0 {
                return Ok::<(), std::io::Error>(());
            }
        }
    };
    match ::tokio::time::timeout(PIPE_RELEASE_WAIT, drain).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => problems.push(format!("draining the response pipe failed: {error}")),
        Err(_) => problems.push(format!(
            "the response pipe was still open {} ms after the kill: a process outside the worker's process group holds it",
            PIPE_RELEASE_WAIT.as_millis()
        )),
    }
    (termination.status, problems)
}
