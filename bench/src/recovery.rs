//! Recovery measurements of the supervision core (DESIGN §17.4, §17.7):
//!
//! - M: a pool of 2 running a mix of clean lines and limit trips (one line
//!   in ten) against the sum of its parts, the clean lines alone plus the
//!   trips alone, in one run (target: within 1.1×);
//! - R: what a restart in a pool costs its caller (the first call after a
//!   trip, no spare, less a warm call) against a cold start (spawn and
//!   `initialize`) (target: at most 1.5×);
//! - H: from the SIGKILL of a worker whose host call is pending to the
//!   caller's `WorkerCrashed`, for the blocking driver (the configured
//!   process host) and the tokio driver (an async host function)
//!   (target: 10 ms).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use quirl_lua_protocol::records::{CommandOutcome, HostCall, Policy, PolicySettings};
use quirl_lua_reference_parent::lifecycle::{MAX_RESTARTS_MAX, PoolOptions, WorkerPool};
use quirl_lua_reference_parent::tokio_worker::{ContainedHost, HostAnswer};
use quirl_lua_reference_parent::{ErrorClass, Worker, WorkerCommand, WorkerConfig};

use crate::inproc::BoxError;
use crate::report::{Row, Summary, Unit, Value};

/// A clean line: a little Lua, no trip.
pub const CLEAN_LINE: &str = "local s = 0 for i = 1, 200 do s = s + i end return s";
/// A tripping line: spends the instruction budget.
pub const TRIP_LINE: &str = "while true do end";

fn policy(allow_process: bool, instructions: u64) -> Result<Policy, BoxError> {
    Ok(Policy::new(PolicySettings {
        allow_process,
        memory_limit_bytes: 32 << 20,
        instruction_limit: instructions,
        wall_time_ms: 10_000,
    })?)
}

fn config(command: &WorkerCommand, allow_process: bool) -> Result<WorkerConfig, BoxError> {
    Ok(
        WorkerConfig::new(command.clone(), policy(allow_process, 2_000_000)?)
            .with_containment(crate::supervise::containment()),
    )
}

/// A pool of 2 that never quarantines, with `spares` warm spares, at rest.
fn pool(command: &WorkerCommand, spares: usize) -> Result<WorkerPool, BoxError> {
    let options = PoolOptions::new()
        .with_size(2)
        .with_spares(spares)
        .with_max_restarts(MAX_RESTARTS_MAX);
    let pool = WorkerPool::start("mix", config(command, false)?, options)?;
    wait_for_spares(&pool, spares)?;
    Ok(pool)
}

fn wait_for_spares(pool: &WorkerPool, spares: usize) -> Result<(), BoxError> {
    let until = Instant::now() + Duration::from_secs(10);
    while pool.stats().spares < spares {
        if Instant::now() >= until {
            return Err("the pool's spares never became ready".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Wall time of 2 callers taking `lines` in order from one shared cursor
/// (as `quirl-lua batch --pool 2` does) on a fresh pool; every line must
/// end as expected.
fn run_lines(command: &WorkerCommand, spares: usize, lines: &[&str]) -> Result<Duration, BoxError> {
    let pool = pool(command, spares)?;
    let cursor = AtomicUsize::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        let callers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| -> Result<(), String> {
                    loop {
                        let index = cursor.fetch_add(1, Ordering::Relaxed);
                        let Some(line) = lines.get(index) else {
                            return Ok(());
                        };
                        match pool.eval(line) {
                            Ok(_) if *line == CLEAN_LINE => {}
                            Err(error)
                                if *line == TRIP_LINE && error.class() == ErrorClass::Limit => {}
                            other => return Err(format!("line {index}: {other:?}")),
                        }
                    }
                })
            })
            .collect();
        for caller in callers {
            caller
                .join()
                .map_err(|_| "a caller panicked".to_owned())??;
        }
        Ok::<_, String>(())
    })?;
    let wall = started.elapsed();
    let report = pool.shutdown(Duration::from_secs(5));
    if !report.is_clean() {
        return Err(format!("mix pool shutdown was not clean: {report:?}").into());
    }
    Ok(wall)
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
}

/// M: the mix against the sum of its parts, rounds rotated so that no part
/// always runs first; per spares setting one row.
pub fn mix(
    command: &WorkerCommand,
    lines: usize,
    rounds: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, BoxError> {
    let mixed: Vec<&str> = (0..lines)
        .map(|i| if i % 10 == 9 { TRIP_LINE } else { CLEAN_LINE })
        .collect();
    let clean: Vec<&str> = mixed.iter().copied().filter(|l| *l == CLEAN_LINE).collect();
    let trips: Vec<&str> = mixed.iter().copied().filter(|l| *l == TRIP_LINE).collect();
    let mut rows = Vec::new();
    for spares in [1, 0] {
        let (mut ratios, mut mixes, mut sums) = (Vec::new(), Vec::new(), Vec::new());
        let mut detail = Vec::new();
        for round in 0..rounds {
            let mut times = [Duration::ZERO; 3];
            for step in 0..3 {
                let part = (round + step) % 3;
                times[part] = match part {
                    0 => run_lines(command, spares, &mixed)?,
                    1 => run_lines(command, spares, &clean)?,
                    _ => run_lines(command, spares, &trips)?,
                };
            }
            let sum = times[1] + times[2];
            ratios.push(times[0].as_secs_f64() / sum.as_secs_f64());
            mixes.push(times[0].as_nanos() as f64);
            sums.push(sum.as_nanos() as f64);
            detail.push(format!(
                "{:.0}/{:.0}+{:.0} ms",
                times[0].as_secs_f64() * 1e3,
                times[1].as_secs_f64() * 1e3,
                times[2].as_secs_f64() * 1e3
            ));
        }
        let ratio = median(&ratios);
        notes.push(format!(
            "M (spares {spares}): {rounds} rounds of {lines} lines (every tenth `{TRIP_LINE}` under 2,000,000 instructions, the others `{CLEAN_LINE}`) on a pool of 2 with 2 callers, parts rotated; per round mix/clean+trips: {}; ratios {}",
            detail.join(", "),
            ratios
                .iter()
                .map(|r| format!("{r:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let target = 1.1;
        rows.push(Row {
            id: "M",
            what: format!(
                "pool of 2, {lines} lines with 10% limit trips, {spares} spare(s): wall time"
            ),
            unit: Unit::Time,
            ours: Value::single(median(&mixes)),
            baseline_name: "clean lines alone + trips alone".to_owned(),
            baseline: Some(Value::single(median(&sums))),
            target: format!("<= {target}x (median of per-round ratios: {ratio:.2}x)"),
            met: Some(ratio <= target),
        });
    }
    Ok(rows)
}

/// R: a restart in a pool against a cold start, `trials` of each,
/// alternating.
pub fn restart(
    command: &WorkerCommand,
    trials: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, BoxError> {
    let options = PoolOptions::new()
        .with_size(1)
        .with_spares(0)
        .with_max_restarts(MAX_RESTARTS_MAX);
    let trip_config = WorkerConfig::new(command.clone(), policy(false, 100_000)?)
        .with_containment(crate::supervise::containment());
    let pool = WorkerPool::start("restart", trip_config.clone(), options)?;
    let (mut cold, mut warm, mut after_trip) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..trials {
        let started = Instant::now();
        let worker = Worker::spawn(trip_config.clone())?;
        cold.push(started.elapsed());
        drop(worker);
        for _ in 0..5 {
            pool.eval("return 1")?;
        }
        let started = Instant::now();
        pool.eval("return 1")?;
        warm.push(started.elapsed());
        match pool.eval(TRIP_LINE) {
            Err(error) if error.class() == ErrorClass::Limit => {}
            other => return Err(format!("expected a limit trip, got {other:?}").into()),
        }
        let started = Instant::now();
        pool.eval("return 1")?;
        after_trip.push(started.elapsed());
    }
    let report = pool.shutdown(Duration::from_secs(5));
    if !report.is_clean() {
        return Err(format!("restart pool shutdown was not clean: {report:?}").into());
    }
    let warm_p50 = Summary::of(&warm).ok_or("no samples")?.p50;
    let restarts: Vec<Duration> = after_trip
        .iter()
        .map(|first| first.saturating_sub(Duration::from_nanos(warm_p50 as u64)))
        .collect();
    let ours = Summary::of(&restarts).ok_or("no samples")?;
    let base = Summary::of(&cold).ok_or("no samples")?;
    notes.push(format!(
        "R: {trials} trials, a cold start (`Worker::spawn`: spawn and `initialize`) then, on a pool of 1 without spares, 5 warm calls, one timed warm call, a trip (instruction limit 100,000), and the timed first call after it; restart = that call less the warm call's p50 ({})",
        crate::report::format_time(warm_p50)
    ));
    Ok(vec![Row {
        id: "R",
        what: "a restart in a pool (first call after a trip, no spare, less a warm call)"
            .to_owned(),
        unit: Unit::Time,
        ours: Value::time(ours),
        baseline_name: "cold start (spawn + initialize)".to_owned(),
        baseline: Some(Value::time(base)),
        target: "<= 1.5x".to_owned(),
        met: Some(ours.p50 / base.p50 <= 1.5),
    }])
}

/// SIGKILL `pid` after `after`; the instant the kill was sent.
fn kill_later(pid: u32, after: Duration) -> std::thread::JoinHandle<Result<Instant, String>> {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let raw = i32::try_from(pid).map_err(|e| e.to_string())?;
        let pid = rustix::process::Pid::from_raw(raw).ok_or("pid 0")?;
        rustix::process::kill_process(pid, rustix::process::Signal::KILL)
            .map_err(|e| e.to_string())?;
        Ok(Instant::now())
    })
}

const HOST_CALL: &str = "return quirl.process.run('sleep 5').status";

async fn never_answer(_: &HostCall, _: &ContainedHost) -> HostAnswer {
    std::future::pending::<()>().await;
    Ok(CommandOutcome {
        status: 0,
        stdout: None,
        stderr: None,
    })
}

/// H: kill-to-error latency of a crash during a host call, both drivers.
pub fn host_call_crash(
    command: &WorkerCommand,
    trials: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, BoxError> {
    let config = config(command, true)?.with_grants(vec!["process.spawn:sleep".to_owned()]);
    let mut blocking = Vec::new();
    let mut worker = Worker::spawn(config.clone())?;
    for _ in 0..trials {
        let killer = kill_later(worker.pid(), Duration::from_millis(30));
        let error = worker.eval(HOST_CALL).err();
        let returned = Instant::now();
        let killed = killer.join().map_err(|_| "the killer panicked")??;
        if error.as_ref().map(|e| e.class()) != Some(ErrorClass::WorkerCrashed) {
            return Err(format!("expected a crash, got {error:?}").into());
        }
        blocking.push(returned.saturating_duration_since(killed));
        // The next trial's worker is a fresh one (this call starts it).
        worker.eval("return 1")?;
    }
    drop(worker);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let asynchronous = runtime.block_on(async {
        let mut samples = Vec::new();
        let mut worker = quirl_lua_reference_parent::tokio_worker::Worker::spawn(config.clone())
            .await
            .map_err(|e| e.to_string())?;
        for _ in 0..trials {
            let killer = kill_later(worker.pid(), Duration::from_millis(30));
            let error = worker.eval_with_host(HOST_CALL, never_answer).await.err();
            let returned = Instant::now();
            let killed = killer
                .join()
                .map_err(|_| "the killer panicked".to_owned())??;
            if error.as_ref().map(|e| e.class()) != Some(ErrorClass::WorkerCrashed) {
                return Err(format!("expected a crash, got {error:?}"));
            }
            samples.push(returned.saturating_duration_since(killed));
            worker.eval("return 1").await.map_err(|e| e.to_string())?;
        }
        Ok::<_, String>(samples)
    })?;
    notes.push(format!(
        "H: {trials} trials per driver; a worker whose `{HOST_CALL}` is pending (blocking: run by the configured process host; tokio: an async host function that never answers) is sent SIGKILL from another thread 30 ms into the call; time from the kill to the caller's `WorkerCrashed` (the worker reaped, its pipe drained, the host command killed)"
    ));
    let row = |what: &str, samples: &[Duration]| -> Result<Row, BoxError> {
        let summary = Summary::of(samples).ok_or("no samples")?;
        let max = samples.iter().max().copied().unwrap_or_default();
        Ok(Row {
            id: "H",
            what: format!("{what}: kill of the worker to `WorkerCrashed`, p50 (p99)"),
            unit: Unit::Time,
            ours: Value::time(summary),
            baseline_name: String::new(),
            baseline: None,
            target: format!(
                "<= 10 ms (max {})",
                crate::report::format_time(max.as_nanos() as f64)
            ),
            met: Some(max <= Duration::from_millis(10)),
        })
    };
    Ok(vec![
        row("blocking driver, configured process host", &blocking)?,
        row("tokio driver, async host function", &asynchronous)?,
    ])
}
