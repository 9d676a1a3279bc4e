//! [`WorkerPool`]: a few async workers started from one configuration,
//! a failed member restarted on its next call (SPEC §13.2; no restart
//! budget or quarantine: that is the `lifecycle` module, DESIGN §17.7).

use std::time::Instant;

use quirl_lua_protocol::records::{ErrorCode, HostCall, Operation, OperationResult};
use serde_json::Value;

use super::{HostAnswer, Worker};
use crate::error::{Error, ErrorClass};
use crate::worker::WorkerConfig;

/// A small pool of async workers started from one configuration.
///
/// Each call goes to an idle member (round-robin among the idle ones) or
/// waits for the next member in turn; the pool owns no task. A member
/// whose worker failed (deadline, crash, violation: the worker was killed
/// and reaped then, SPEC §13.2) is restarted from the configuration on its
/// next call. This is not the blocking lifecycle layer (DESIGN §17.7): it
/// keeps no restart budget, quarantine or statistics.
pub struct WorkerPool {
    config: WorkerConfig,
    members: Vec<::tokio::sync::Mutex<Worker>>,
    next: std::sync::atomic::AtomicUsize,
}

impl WorkerPool {
    /// Start `size` workers (at least one). If one fails to start, those
    /// already started are killed and reaped (dropped) and its error is
    /// returned.
    pub async fn start(config: WorkerConfig, size: usize) -> Result<Self, Error> {
        if size == 0 {
            return Err(Error::new(
                ErrorClass::InvalidInput,
                ErrorCode::InvalidArgument,
                "a worker pool needs at least one member",
            ));
        }
        let mut members = Vec::with_capacity(size);
        for _ in 0..size {
            members.push(::tokio::sync::Mutex::new(
                Worker::spawn(config.clone()).await?,
            ));
        }
        Ok(Self {
            config,
            members,
            next: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// [`Worker::call`] on a member.
    pub async fn call(
        &self,
        operation: Operation,
        deadline: Option<Instant>,
    ) -> Result<OperationResult, Error> {
        let mut worker = self.ready_member().await?;
        worker.call(operation, deadline).await
    }

    /// [`Worker::call_with_host`] on a member.
    pub async fn call_with_host(
        &self,
        operation: Operation,
        deadline: Option<Instant>,
        host: impl AsyncFnMut(&HostCall) -> HostAnswer,
    ) -> Result<OperationResult, Error> {
        let mut worker = self.ready_member().await?;
        worker.call_with_host(operation, deadline, host).await
    }

    /// [`Worker::eval`] on a member.
    pub async fn eval(&self, source: &str) -> Result<Value, Error> {
        let mut worker = self.ready_member().await?;
        worker.eval(source).await
    }

    /// The number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The current worker pids, one per member (the pid of a member's
    /// last worker while it waits for its restart); `None` for a member
    /// busy with a call.
    pub fn pids(&self) -> Vec<Option<u32>> {
        self.members
            .iter()
            .map(|member| member.try_lock().ok().map(|worker| worker.pid()))
            .collect()
    }

    /// Shut every member down ([`Worker::shutdown`]); the first error, if
    /// any, after all of them were ended.
    pub async fn shutdown(self) -> Result<(), Error> {
        let mut first = None;
        for member in self.members {
            let worker = member.into_inner();
            let ended = if worker.is_poisoned() {
                // Already killed and reaped, or abandoned mid-call: dropping
                // it kills and reaps what is left.
                drop(worker);
                Ok(())
            } else {
                worker.shutdown().await
            };
            if let Err(error) = ended {
                first.get_or_insert(error);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// An idle member (or the next in turn, once it is free), restarted
    /// first if its worker failed.
    async fn ready_member(&self) -> Result<::tokio::sync::MutexGuard<'_, Worker>, Error> {
        let count = self.members.len();
        let start = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % count.max(1);
        let turn = self.members.iter().cycle().skip(start).take(count);
        let idle = turn.clone().find_map(|member| member.try_lock().ok());
        let mut worker = match idle {
            Some(worker) => worker,
            None => match turn.clone().next() {
                Some(member) => member.lock().await,
                None => {
                    return Err(Error::new(
                        ErrorClass::Unavailable,
                        ErrorCode::Lua,
                        "the worker pool has no member",
                    ));
                }
            },
        };
        if worker.is_poisoned() {
            // A failed restart leaves it poisoned: the next call tries again.
            worker.restart().await?;
        }
        Ok(worker)
    }
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("size", &self.members.len())
            .field("policy", &self.config.policy)
            .finish_non_exhaustive()
    }
}
