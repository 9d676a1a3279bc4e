//! Measure the parent's kill latency (deadline → worker killed, reaped and
//! pipe drained), cold start (spawn → first answer) and warm round trip.
//!
//! ```sh
//! cargo build --release -p quirl-lua-cli -p quirl-lua-testkit --bins && cargo build --release -p quirl-lua-reference-parent --examples
//! # scripted worker that never answers / answers at once:
//! target/x86_64-unknown-linux-gnu/release/examples/supervision_timing \
//!     --stuck "target/x86_64-unknown-linux-gnu/release/quirl-lua-fake-worker never-answer" \
//!     --echo "target/x86_64-unknown-linux-gnu/release/quirl-lua-fake-worker echo"
//! # a real worker stuck in a native call (default source below):
//! target/x86_64-unknown-linux-gnu/release/examples/supervision_timing \
//!     --stuck "target/x86_64-unknown-linux-gnu/release/quirl-lua --internal-lua-worker-v1" \
//!     --echo "target/x86_64-unknown-linux-gnu/release/quirl-lua --internal-lua-worker-v1"
//! ```
//!
//! Options: `--trials N` (kill trials, default 200), `--round-trips N`
//! (default 20000), `--wall-ms N` (deadline of each kill trial, default 20),
//! `--source LUA` (what the stuck worker evaluates, default
//! `table.move({}, 1, math.maxinteger - 1, 2)`).

use std::time::{Duration, Instant};

use quirl_lua_reference_parent::{
    ErrorClass, Policy, PolicySettings, Worker, WorkerCommand, WorkerConfig,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut stuck = None;
    let mut echo = None;
    let mut trials = 200_usize;
    let mut round_trips = 20_000_usize;
    let mut wall_ms = 20_u64;
    let mut source = "table.move({}, 1, math.maxinteger - 1, 2)".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--stuck" => stuck = Some(WorkerCommand::parse(&value)?),
            "--echo" => echo = Some(WorkerCommand::parse(&value)?),
            "--trials" => trials = value.parse()?,
            "--round-trips" => round_trips = value.parse()?,
            "--wall-ms" => wall_ms = value.parse()?,
            "--source" => source = value,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    if let Some(command) = echo.clone() {
        let policy = Policy::new(PolicySettings {
            allow_process: false,
            memory_limit_bytes: 32 << 20,
            instruction_limit: 100_000_000,
            wall_time_ms: 5_000,
        })?;
        let config = WorkerConfig::new(command, policy);
        let mut samples = Vec::with_capacity(trials);
        for _ in 0..trials {
            let started = Instant::now();
            let mut worker = Worker::spawn(config.clone())?;
            worker.eval("return 1")?;
            samples.push(started.elapsed());
        }
        report("cold start (spawn, initialize, first eval)", &mut samples);
    }
    if let Some(command) = echo {
        let policy = Policy::new(PolicySettings {
            allow_process: false,
            memory_limit_bytes: 32 << 20,
            instruction_limit: 100_000_000,
            wall_time_ms: 5_000,
        })?;
        let mut worker = Worker::spawn(WorkerConfig::new(command, policy))?;
        for _ in 0..1_000 {
            worker.eval("return 1")?;
        }
        let mut samples = Vec::with_capacity(round_trips);
        for _ in 0..round_trips {
            let started = Instant::now();
            worker.eval("return 1")?;
            samples.push(started.elapsed());
        }
        report("warm round trip (eval \"return 1\")", &mut samples);
    }
    if let Some(command) = stuck {
        let policy = Policy::new(PolicySettings {
            allow_process: false,
            memory_limit_bytes: 32 << 20,
            instruction_limit: 100_000_000,
            wall_time_ms: wall_ms,
        })?;
        let config = WorkerConfig::new(command, policy);
        let mut samples = Vec::with_capacity(trials);
        for _ in 0..trials {
            let mut worker = Worker::spawn(config.clone())?;
            let started = Instant::now();
            let deadline = started + Duration::from_millis(wall_ms);
            let error = match worker.eval(&source) {
                Ok(value) => return Err(format!("the stuck worker answered {value}").into()),
                Err(error) => error,
            };
            let returned = Instant::now();
            if error.class() != ErrorClass::Deadline {
                return Err(format!("expected a deadline error, got {error}").into());
            }
            samples.push(returned.saturating_duration_since(deadline));
        }
        report("deadline -> killed, reaped, pipe drained", &mut samples);
    }
    Ok(())
}

fn report(what: &str, samples: &mut [Duration]) {
    if samples.is_empty() {
        return;
    }
    samples.sort_unstable();
    let at = |q: f64| {
        let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[index.min(samples.len() - 1)]
    };
    let mean = samples.iter().sum::<Duration>() / u32::try_from(samples.len()).unwrap_or(u32::MAX);
    println!(
        "{what}: n={} min={:?} p50={:?} mean={:?} p99={:?} max={:?}",
        samples.len(),
        samples[0],
        at(0.5),
        mean,
        at(0.99),
        samples[samples.len() - 1]
    );
}
