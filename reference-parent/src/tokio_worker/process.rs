//! The async driver's worker process: spawning it (the blocking
//! machinery of `crate::child_process`, on `spawn_blocking`), its pipes and
//! pidfd registered with tokio, and the kill → reap → drain that ends it
//! (SPEC §13.2, DESIGN §17.4).

use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use ::tokio::io::unix::AsyncFd;
use ::tokio::task::spawn_blocking;
use quirl_lua_protocol::ParentConnection;

use ::tokio::io::Interest;

use super::transport::{AsyncTransport, register};
use crate::child_process::worker_kill::{Termination, WorkerProcess};
use crate::child_process::worker_spawn;
use crate::error::Error;
use crate::supervision::classify::{self, WorkerEnd};
use crate::worker::{PIPE_RELEASE_WAIT, WorkerConfig};

/// The parts that exist only while a worker process runs. Dropping it
/// (a call's future dropped mid-request, or the handle dropped) closes the
/// pipes, kills the tree and reaps the worker right there, synchronously:
/// one group `SIGKILL` and one `waitpid` (SPEC §17.1).
pub(super) struct Live {
    pub(super) transport: AsyncTransport,
    pub(super) connection: ParentConnection,
    /// The worker's pidfd (a duplicate), readable once it exited.
    pub(super) exit: Option<AsyncFd<OwnedFd>>,
    pub(super) process: Option<WorkerProcess>,
}

impl Live {
    pub(super) fn pid(&self) -> u32 {
        self.process.as_ref().map_or(0, WorkerProcess::pid)
    }

    /// Whether the worker process has exited (its pidfd is readable).
    pub(super) fn has_exited(&self) -> bool {
        self.exit
            .as_ref()
            .is_some_and(|fd| crate::cancel::readable(fd.get_ref().as_fd()).unwrap_or(false))
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.transport.close_input();
        if let Some(mut process) = self.process.take() {
            let _ = process.kill_tree_and_reap();
        }
    }
}

/// Spawn the worker on `spawn_blocking` and register its pipes with tokio;
/// whether it runs in a cgroup of its own.
pub(super) async fn start(config: &WorkerConfig) -> Result<(Live, bool), Error> {
    let owned = config.clone();
    // If this future is dropped, the task still ends: a worker it started
    // is dropped there, which kills and reaps it.
    let spawned = spawn_blocking(move || {
        let cgroup = owned.worker_cgroup()?;
        let contained = cgroup.is_some();
        worker_spawn::spawn(owned.command(), owned.limits(), cgroup)
            .map(|spawned| (spawned, contained))
            .map_err(|error| classify::spawn_failed(owned.command(), error))
    })
    .await
    .map_err(|error| {
        classify::spawn_failed(
            config.command(),
            format!("the spawning task failed: {error}"),
        )
    })??;
    let (spawned, contained) = spawned;
    let process = spawned.process;
    let pid = process.pid();
    let registered = AsyncTransport::new(spawned.input, spawned.output).and_then(|transport| {
        let exit = match process.exit_fd() {
            Some(fd) => Some(register(fd.try_clone_to_owned()?, Interest::READABLE)?),
            None => None,
        };
        Ok((transport, exit))
    });
    match registered {
        Ok((transport, exit)) => Ok((
            Live {
                transport,
                connection: ParentConnection::new(),
                exit,
                process: Some(process),
            },
            contained,
        )),
        Err(error) => {
            let end = kill_and_reap(process).await.into_end();
            let failure = classify::spawn_failed(
                config.command(),
                format!("registering its pipes with tokio failed: {error}"),
            );
            Err(classify::with_end(failure, pid, end))
        }
    }
}

/// The blocking kill and reap (DESIGN §17.4 steps 2–5), on
/// `spawn_blocking`. The task owns the process, so it finishes even if
/// this future is dropped.
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
pub(super) async fn end(mut live: Live) -> WorkerEnd {
    live.transport.close_input();
    let Some(process) = live.process.take() else {
        return WorkerEnd::default();
    };
    let mut end = kill_and_reap(process).await.into_end();
    let drained = live
        .transport
        .drain_until_closed(Instant::now() + PIPE_RELEASE_WAIT)
        .await;
    end.problems.extend(classify::drain_problem(
        drained,
        PIPE_RELEASE_WAIT.as_millis(),
    ));
    end
}
