//! Measurements through the parent library: warm round trips (X2), cold
//! start (X3), kill latency (X4), and the RSS figures of X5 (pools:
//! `pools`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quirl_lua_protocol::WireFrame;
use quirl_lua_protocol::records::{
    Operation, ParentFrame, Policy, PolicySettings, Request, Response, WorkerFrame,
};
use quirl_lua_reference_parent::lifecycle::{PoolOptions, WorkerPool};
use std::sync::OnceLock;

use quirl_lua_reference_parent::Cancel;
use quirl_lua_reference_parent::process_host::{
    Environment, Grants, ProcessAccess, ProcessHostConfig, ProcessRequest, run_command,
};
use quirl_lua_reference_parent::{Containment, ErrorClass, Worker, WorkerCommand, WorkerConfig};

use crate::inproc::BoxError;

/// The policy of every warm measurement (generous: nothing trips).
pub fn policy() -> Result<Policy, BoxError> {
    Ok(Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms: 10_000,
    })?)
}

/// The containment of every section (`--containment`; default `auto`).
pub static CONTAINMENT: OnceLock<Containment> = OnceLock::new();

pub fn containment() -> Containment {
    CONTAINMENT.get().copied().unwrap_or_default()
}

pub fn config(command: &WorkerCommand) -> Result<WorkerConfig, BoxError> {
    Ok(WorkerConfig::new(command.clone(), policy()?).with_containment(containment()))
}

/// The framed bytes of the `eval "return 1"` request and its response at
/// a representative id, for the ping-pong baseline.
pub fn return_one_frames(id: u64) -> Result<(Vec<u8>, Vec<u8>), BoxError> {
    let request = ParentFrame::Request {
        request: Request {
            id,
            operation: Operation::Eval {
                source: "return 1".to_owned(),
            },
        },
    }
    .encode_framed()?;
    let response = WorkerFrame::Response {
        response: Response::success(id, 1.into()),
    }
    .encode_framed()?;
    Ok((request, response))
}

/// Round trips and where their time went.
pub struct RoundTrips {
    pub samples: Vec<Duration>,
    /// CPUs the peer (worker or echo child) may run on.
    pub peer_cpus: Vec<usize>,
    /// CPU time per round trip of the calling thread, nanoseconds.
    pub own_cpu_ns: f64,
    /// CPU time per round trip of the peer process, nanoseconds.
    pub peer_cpu_ns: f64,
    /// Heap allocations per round trip in this process.
    pub allocations: f64,
}

/// CPU time a task has run, in nanoseconds (`/proc/…/schedstat`).
pub fn cpu_ns(path: &str) -> Result<u64, BoxError> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .ok_or("bad schedstat")?)
}

/// Time `n` round trips of `f` after `warmup`, with the CPU time of this
/// thread and of process `peer` over the timed part.
pub fn round_trips(
    peer: u32,
    warmup: usize,
    n: usize,
    mut f: impl FnMut() -> Result<(), BoxError>,
) -> Result<RoundTrips, BoxError> {
    for _ in 0..warmup {
        f()?;
    }
    let peer_path = format!("/proc/{peer}/schedstat");
    let own_path = "/proc/thread-self/schedstat";
    let calls0 = crate::alloc::calls();
    let (own0, peer0) = (cpu_ns(own_path)?, cpu_ns(&peer_path)?);
    let samples = crate::inproc::sample(0, n, &mut f)?;
    let (own1, peer1) = (cpu_ns(own_path)?, cpu_ns(&peer_path)?);
    let calls1 = crate::alloc::calls();
    Ok(RoundTrips {
        samples,
        peer_cpus: crate::pingpong::affinity_of(peer)?,
        own_cpu_ns: own1.saturating_sub(own0) as f64 / n as f64,
        peer_cpu_ns: peer1.saturating_sub(peer0) as f64 / n as f64,
        allocations: calls1.saturating_sub(calls0) as f64 / n as f64,
    })
}

/// X2: `n` warm `eval "return 1"` round trips on one live worker.
pub fn warm_round_trips(
    command: &WorkerCommand,
    warmup: usize,
    n: usize,
) -> Result<RoundTrips, BoxError> {
    let mut worker = Worker::spawn(config(command)?)?;
    let pid = worker.pid();
    let result = round_trips(pid, warmup, n, || {
        worker.eval("return 1")?;
        Ok(())
    })?;
    worker.shutdown()?;
    Ok(result)
}

/// X3: spawn → initialize → first response, `n` times (each worker is then
/// killed and reaped outside the timed part). Returns (spawn+initialize,
/// spawn+initialize+first eval).
pub fn cold_starts(
    command: &WorkerCommand,
    n: usize,
) -> Result<(Vec<Duration>, Vec<Duration>), BoxError> {
    cold_starts_in(command, n, containment())
}

/// [`cold_starts`] under one containment mode.
pub fn cold_starts_in(
    command: &WorkerCommand,
    n: usize,
    containment: Containment,
) -> Result<(Vec<Duration>, Vec<Duration>), BoxError> {
    let config = config(command)?.with_containment(containment);
    let mut initialized = Vec::with_capacity(n);
    let mut answered = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let mut worker = Worker::spawn(config.clone())?;
        initialized.push(started.elapsed());
        worker.eval("return 1")?;
        answered.push(started.elapsed());
        drop(worker);
    }
    Ok((initialized, answered))
}

/// X3 baseline: spawn `/bin/true` and wait for it, `n` times.
pub fn bin_true(n: usize) -> Result<Vec<Duration>, BoxError> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let status = Command::new("/bin/true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        samples.push(started.elapsed());
        if !status.success() {
            return Err("/bin/true failed".into());
        }
    }
    Ok(samples)
}

/// X4: a worker stuck in one native call; time from the deadline until the
/// call returned (worker killed, reaped, pipe drained), `n` times.
pub fn kill_latency(
    command: &WorkerCommand,
    source: &str,
    wall_ms: u64,
    n: usize,
) -> Result<Vec<Duration>, BoxError> {
    kill_latency_in(command, source, wall_ms, n, containment())
}

/// [`kill_latency`] under one containment mode.
pub fn kill_latency_in(
    command: &WorkerCommand,
    source: &str,
    wall_ms: u64,
    n: usize,
    containment: Containment,
) -> Result<Vec<Duration>, BoxError> {
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms: wall_ms,
    })?;
    let config = WorkerConfig::new(command.clone(), policy).with_containment(containment);
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let mut worker = Worker::spawn(config.clone())?;
        // Taken just before the call: the library's own deadline is a few
        // hundred nanoseconds later, so this overstates the latency.
        let deadline = Instant::now() + Duration::from_millis(wall_ms);
        let error = match worker.eval(source) {
            Ok(value) => return Err(format!("the stuck worker answered {value}").into()),
            Err(error) => error,
        };
        let returned = Instant::now();
        if error.class() != ErrorClass::Deadline {
            return Err(format!("expected a deadline error, got {error}").into());
        }
        samples.push(returned.saturating_duration_since(deadline));
    }
    Ok(samples)
}

/// One host command (`quirl.process.run` without a worker: the process
/// host alone), `n` times: spawn, capture, reap, and in cgroup mode the
/// cgroup's creation, kill, `populated 0` wait and removal.
pub fn host_commands_in(
    command: &str,
    n: usize,
    containment: Containment,
) -> Result<Vec<Duration>, BoxError> {
    host_commands_granted(command, "process.spawn", n, containment)
}

/// [`host_commands_in`] under one grant: `process.spawn` runs without an
/// execute ruleset, `process.spawn:NAME` with the Landlock one where the
/// kernel offers it (DESIGN §16.6).
pub fn host_commands_granted(
    command: &str,
    grant: &str,
    n: usize,
    containment: Containment,
) -> Result<Vec<Duration>, BoxError> {
    host_commands_limited(
        command,
        grant,
        n,
        containment,
        Some(quirl_lua_reference_parent::process_host::DEFAULT_COMMAND_PIDS_MAX),
    )
}

/// [`host_commands_granted`] with the command's process limit
/// (`None`: no limit, so no `pids` cgroup of its own where cgroup v2 has
/// no `pids` controller).
pub fn host_commands_limited(
    command: &str,
    grant: &str,
    n: usize,
    containment: Containment,
    pids_max: Option<u64>,
) -> Result<Vec<Duration>, BoxError> {
    let config = ProcessHostConfig::new(
        ProcessAccess {
            allow_process: true,
            process_enabled: true,
        },
        Grants::parse([grant])?,
        Environment::empty().with("PATH", "/usr/bin:/bin")?,
        "/",
    )?
    .with_containment(containment)
    .with_command_pids_max(pids_max);
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let request = ProcessRequest {
            command: command.to_owned(),
            deadline: started + Duration::from_secs(10),
            max_output_bytes: 1024,
        };
        run_command(&config, &request, &Cancel::new())?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

/// `VmRSS` of a process, in bytes.
pub fn rss_of(pid: &str) -> Result<u64, BoxError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| "no VmRSS".into())
}

/// X5: idle RSS of a freshly initialized worker (after one `return 1`).
pub fn idle_worker_rss(command: &WorkerCommand) -> Result<u64, BoxError> {
    let mut worker = Worker::spawn(config(command)?)?;
    worker.eval("return 1")?;
    let rss = rss_of(&worker.pid().to_string())?;
    worker.shutdown()?;
    Ok(rss)
}

/// X5: the parent's RSS and heap growth per pooled worker (pool of `size`,
/// each member used once).
pub fn parent_cost_per_worker(
    command: &WorkerCommand,
    size: usize,
) -> Result<(f64, f64), BoxError> {
    let rss_before = rss_of("self")?;
    let heap_before = crate::alloc::live();
    let pool = WorkerPool::start("rss", config(command)?, PoolOptions::new().with_size(size))?;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..size)
            .map(|_| scope.spawn(|| pool.eval("return 1").map(drop)))
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| "caller panicked".to_owned())?
                .map_err(|e| e.to_string())
        })
    })?;
    let rss_after = rss_of("self")?;
    let heap_after = crate::alloc::live();
    let report = pool.shutdown(Duration::from_secs(5));
    if !report.is_clean() {
        return Err(format!("pool shutdown was not clean: {report:?}").into());
    }
    let per = |after: u64, before: u64| after.saturating_sub(before) as f64 / size as f64;
    Ok((
        per(rss_after, rss_before),
        per(heap_after as u64, heap_before as u64),
    ))
}
