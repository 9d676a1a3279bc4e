//! Pool measurements (DESIGN §17.7): pool scaling against the no-pool
//! ceiling (X6), the first request after a limit trip with and without a
//! warm spare (T), and the throughput/latency curve of 1–8 callers on
//! pools of 1, 2 and 4 (S).

use std::time::{Duration, Instant};

use quirl_lua_protocol::records::ErrorCode;
use quirl_lua_protocol::records::{Policy, PolicySettings};
use quirl_lua_reference_parent::lifecycle::{PoolOptions, WorkerPool};
use quirl_lua_reference_parent::{Worker, WorkerCommand, WorkerConfig};

use crate::inproc::BoxError;
use crate::supervise::config;

/// Run `callers` threads, each calling `call` `calls` times; the wall time
/// and every call's latency.
fn drive(
    callers: usize,
    calls: usize,
    call: impl Fn(usize) -> Result<(), String> + Sync,
) -> Result<(Duration, Vec<Duration>), BoxError> {
    let started = Instant::now();
    let latencies = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..callers)
            .map(|caller| {
                let call = &call;
                scope.spawn(move || -> Result<Vec<Duration>, String> {
                    let mut samples = Vec::with_capacity(calls);
                    for _ in 0..calls {
                        let at = Instant::now();
                        call(caller)?;
                        samples.push(at.elapsed());
                    }
                    Ok(samples)
                })
            })
            .collect();
        let mut all = Vec::with_capacity(callers * calls);
        for handle in handles {
            all.extend(handle.join().map_err(|_| "caller panicked".to_owned())??);
        }
        Ok::<_, String>(all)
    })?;
    Ok((started.elapsed(), latencies))
}

/// Calls per second of `callers` threads × `calls` CPU-bound evals through
/// a pool of `size` (members warmed first).
pub fn pool_rate(
    command: &WorkerCommand,
    size: usize,
    callers: usize,
    calls: usize,
    script: &str,
) -> Result<(f64, Vec<Duration>), BoxError> {
    let pool = WorkerPool::start(
        "bench",
        config(command)?,
        PoolOptions::new().with_size(size).with_spares(0),
    )?;
    drive(size, 1, |_| {
        pool.eval(script).map(drop).map_err(|e| e.to_string())
    })?;
    let (wall, latencies) = drive(callers, calls, |_| {
        pool.eval(script).map(drop).map_err(|e| e.to_string())
    })?;
    let report = pool.shutdown(Duration::from_secs(5));
    if !report.is_clean() {
        return Err(format!("pool shutdown was not clean: {report:?}").into());
    }
    Ok(((callers * calls) as f64 / wall.as_secs_f64(), latencies))
}

/// The ceiling of pool scaling: `threads` independent workers, each driven
/// by its own thread (no pool), `calls` evals each; calls per second.
pub fn independent_rate(
    command: &WorkerCommand,
    threads: usize,
    calls: usize,
    script: &str,
) -> Result<f64, BoxError> {
    let config = config(command)?;
    let workers: Vec<std::sync::Mutex<Worker>> = (0..threads)
        .map(|_| Worker::spawn(config.clone()).map(std::sync::Mutex::new))
        .collect::<Result<_, _>>()?;
    let eval = |caller: usize| -> Result<(), String> {
        let mut worker = workers[caller]
            .lock()
            .map_err(|_| "worker lock poisoned".to_owned())?;
        worker.eval(script).map(drop).map_err(|e| e.to_string())
    };
    drive(threads, 1, eval)?;
    let (wall, _) = drive(threads, calls, eval)?;
    for worker in workers {
        worker
            .into_inner()
            .map_err(|_| "worker lock poisoned")?
            .shutdown()?;
    }
    Ok((threads * calls) as f64 / wall.as_secs_f64())
}

/// First requests after a limit trip, and warm round trips on the same
/// pool, with `spares` warm spares.
#[derive(Default)]
pub struct TripLatency {
    /// `eval "return 1"` issued as soon as the tripped call returned.
    pub first: Vec<Duration>,
    /// `eval "return 1"` on the same member, warm, right after 20 others.
    pub warm: Vec<Duration>,
    /// `eval "return 1"` on the same warm member after it idled for [`IDLE`].
    pub idle: Vec<Duration>,
}

/// How long the member idles before the `idle` sample: a request to a
/// process that has slept for milliseconds pays for waking it, which a
/// spare (idle since it started) pays too.
pub const IDLE: Duration = Duration::from_millis(10);

/// The policy of the trip measurement: a small instruction budget, so that
/// `while true do end` trips in well under a millisecond.
fn trip_policy() -> Result<Policy, BoxError> {
    Ok(Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000,
        wall_time_ms: 10_000,
    })?)
}

/// A pool of one that the trip measurement drives.
pub struct TripPool {
    pool: WorkerPool,
    spares: usize,
}

impl TripPool {
    pub fn start(command: &WorkerCommand, spares: usize) -> Result<Self, BoxError> {
        let config = WorkerConfig::new(command.clone(), trip_policy()?)
            .with_containment(crate::supervise::containment());
        let options = PoolOptions::new()
            .with_size(1)
            .with_spares(spares)
            .with_max_restarts(quirl_lua_reference_parent::lifecycle::MAX_RESTARTS_MAX)
            .with_restart_window(Some(Duration::from_secs(1)));
        Ok(Self {
            pool: WorkerPool::start("trip", config, options)?,
            spares,
        })
    }

    /// One trial: wait until the pool is at rest (spares ready, the last
    /// swapped-out worker checked), warm the member, time a warm request
    /// and one after [`IDLE`], trip the budget, then time the next request.
    pub fn trial(&mut self, into: &mut TripLatency) -> Result<(), BoxError> {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let stats = self.pool.stats();
            // The keeper checks a swapped-out worker before it starts the
            // next spare, so a full set of spares means both are done.
            if stats.spares == self.spares {
                break;
            }
            if Instant::now() >= until {
                return Err(format!("the trip pool did not come to rest: {stats:?}").into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        for _ in 0..20 {
            self.pool.eval("return 1")?;
        }
        let started = Instant::now();
        self.pool.eval("return 1")?;
        into.warm.push(started.elapsed());
        // The spare has been idle since it started; so is this member now.
        std::thread::sleep(IDLE);
        let started = Instant::now();
        self.pool.eval("return 1")?;
        into.idle.push(started.elapsed());
        match self.pool.eval("while true do end") {
            Err(error) if error.code() == ErrorCode::ResourceLimit => {}
            other => return Err(format!("expected a tripped budget, got {other:?}").into()),
        }
        let started = Instant::now();
        self.pool.eval("return 1")?;
        into.first.push(started.elapsed());
        Ok(())
    }

    pub fn finish(self) -> Result<(), BoxError> {
        let report = self.pool.shutdown(Duration::from_secs(5));
        if report.is_clean() {
            Ok(())
        } else {
            Err(format!("trip pool shutdown was not clean: {report:?}").into())
        }
    }
}

/// One cell of the curve: `callers` threads × `calls` evals of `script`
/// on a pool of `size`: (requests/s, latencies).
pub fn curve_cell(
    command: &WorkerCommand,
    size: usize,
    callers: usize,
    calls: usize,
    script: &str,
) -> Result<(f64, Vec<Duration>), BoxError> {
    pool_rate(command, size, callers, calls, script)
}
