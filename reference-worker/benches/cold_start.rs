//! Where a worker's cold start goes (BENCHMARKS.md, "Cold start
//! breakdown"): the process phases of `quirl-worker` from spawn to its first
//! response, and the in-process steps of building the sandbox VM.
//!
//! ```sh
//! cargo bench -p quirl-lua-reference-worker --bench cold_start
//! # several worker binaries side by side (interleaved round by round):
//! cargo bench -p quirl-lua-reference-worker --bench cold_start -- \
//!     --worker OLD/quirl-worker --worker target/x86_64-unknown-linux-gnu/release/quirl-worker
//! ```
//!
//! Options: `--worker PATH` (repeatable; default: this package's
//! `quirl-worker`), `--rounds N` (process rounds, default 300), `--builds N`
//! (in-process VM builds, default 300), `--pin CPU` (pin this process and
//! so every child to one CPU).
//!
//! Process rows: each round spawns every variant of every worker once, in
//! turn, and times it with the wall clock; the table gives medians over the
//! rounds. The variants add one phase at a time, so the difference of two
//! consecutive medians is that phase's cost:
//!
//! 1. `/bin/true`, spawn → exit: the floor of `fork` + `exec` + reap;
//! 2. the worker with an empty stdin, spawn → exit: `exec` of the worker,
//!    dynamic linking, the Rust runtime, the descriptor set-up, a read that
//!    sees end of input, exit (no VM is built);
//! 3. `initialize` written, spawn → its response read: plus reading and
//!    decoding the frame, building the VM, the lockdown, writing the answer;
//! 4. the same with `--no-lockdown`: the difference to 3 is the lockdown;
//! 5. `initialize` and `eval "return 1 + 1"`, spawn → the eval's response:
//!    X3's "first response" without the supervisor library around it.
//!
//! In-process rows: [`quirl_lua_reference_worker::sandbox::build_observed`]
//! reports each build step; the rest of `Vm::new` (SDK, baseline collection,
//! hook) is replayed here with the same public calls, and the lockdown's
//! BPF program is compiled (not installed). Each step is timed with this
//! thread's CPU clock (a shared machine's other processes do not inflate
//! it) and the table gives medians.
//!
//! Landlock row (Linux): what step 4 of the lockdown (DESIGN §18.3, the
//! worker's empty Landlock domain) costs by itself. A domain cannot be left
//! and nests at most 16 deep, so each round runs this bench binary again
//! as a child that times `lockdown::landlock::enter_empty_domain` once
//! (wall and thread CPU time) and prints both; the table gives medians.
//!
//! Run by `cargo test --all-targets` with no `--bench` argument: then a
//! few rounds only, as a smoke test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::records::{Policy, PolicySettings};
use quirl_lua_reference_worker::budget::Meter;
use quirl_lua_reference_worker::registry::Registry;
use quirl_lua_reference_worker::sandbox::grants::{Capabilities, default_grants};
use quirl_lua_reference_worker::sandbox::sdk::{self, SdkState};
use quirl_lua_reference_worker::sandbox::{self, BuildStep};
use rustix::time::{ClockId, clock_gettime};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The `initialize` request of the fixtures (no grants; 4 MiB, 500,000
/// instructions, 100 ms).
const INITIALIZE: &[u8] = include_bytes!("../../fixtures/frames/initialize_without_grants.bin");
/// `eval "return 1 + 1"`, request 2.
const EVAL: &[u8] = include_bytes!("../../fixtures/frames/eval_simple.bin");

struct Options {
    workers: Vec<PathBuf>,
    rounds: usize,
    builds: usize,
    pin: Option<usize>,
}

fn options() -> Options {
    let mut args = std::env::args().skip(1);
    let mut options = Options {
        workers: Vec::new(),
        rounds: 300,
        builds: 300,
        pin: None,
    };
    let mut bench = false;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bench" => bench = true,
            "--worker" => options
                .workers
                .push(args.next().expect("--worker PATH").into()),
            "--rounds" => options.rounds = args.next().expect("--rounds N").parse().expect("N"),
            "--builds" => options.builds = args.next().expect("--builds N").parse().expect("N"),
            "--pin" => options.pin = Some(args.next().expect("--pin CPU").parse().expect("CPU")),
            _ => {}
        }
    }
    if !bench {
        eprintln!("cold_start: smoke run (no --bench argument): 3 rounds, 3 builds");
        options.rounds = 3;
        options.builds = 3;
    }
    if options.workers.is_empty() {
        options
            .workers
            .push(PathBuf::from(env!("CARGO_BIN_EXE_quirl-worker")));
    }
    options
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn micros(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

fn thread_cpu() -> Duration {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// One process variant.
#[derive(Clone, Copy)]
enum Variant {
    BinTrue,
    EmptyInput,
    Initialize,
    InitializeNoLockdown,
    FirstResponse,
}

const VARIANTS: [(Variant, &str); 5] = [
    (Variant::BinTrue, "`/bin/true`: spawn → exit"),
    (Variant::EmptyInput, "empty stdin: spawn → exit (no VM)"),
    (Variant::Initialize, "spawn → `initialize` answered"),
    (
        Variant::InitializeNoLockdown,
        "spawn → `initialize` answered, `--no-lockdown`",
    ),
    (
        Variant::FirstResponse,
        "spawn → `initialize` → first `eval` answered",
    ),
];

fn read_frame(stream: &mut impl Read) -> Vec<u8> {
    let mut length = [0_u8; 4];
    stream.read_exact(&mut length).expect("a response frame");
    let mut payload = vec![0_u8; u32::from_be_bytes(length) as usize];
    stream.read_exact(&mut payload).expect("a response payload");
    payload
}

fn run(worker: &PathBuf, variant: Variant) -> Duration {
    let started = Instant::now();
    match variant {
        Variant::BinTrue | Variant::EmptyInput => {
            let program = match variant {
                Variant::BinTrue => PathBuf::from("/bin/true"),
                _ => worker.clone(),
            };
            let status = Command::new(program)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("spawn");
            let elapsed = started.elapsed();
            assert!(status.success());
            elapsed
        }
        Variant::Initialize | Variant::InitializeNoLockdown | Variant::FirstResponse => {
            let mut command = Command::new(worker);
            if matches!(variant, Variant::InitializeNoLockdown) {
                command.arg("--no-lockdown");
            }
            let mut child = command
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn");
            let mut stdin = child.stdin.take().expect("stdin");
            let mut frames = child.stderr.take().expect("stderr");
            stdin.write_all(INITIALIZE).expect("initialize");
            if matches!(variant, Variant::FirstResponse) {
                stdin.write_all(EVAL).expect("eval");
            }
            let first = read_frame(&mut frames);
            let last = if matches!(variant, Variant::FirstResponse) {
                read_frame(&mut frames)
            } else {
                first.clone()
            };
            let elapsed = started.elapsed();
            assert!(
                String::from_utf8_lossy(&first).contains(r#""ok":true"#),
                "initialize failed: {}",
                String::from_utf8_lossy(&first)
            );
            assert!(String::from_utf8_lossy(&last).contains(r#""ok":true"#));
            drop(stdin);
            let status = child.wait().expect("wait");
            assert!(status.success());
            elapsed
        }
    }
}

fn processes(options: &Options) {
    let mut samples =
        vec![vec![Vec::with_capacity(options.rounds); VARIANTS.len()]; options.workers.len()];
    for _ in 0..options.rounds {
        for (w, worker) in options.workers.iter().enumerate() {
            for (v, (variant, _)) in VARIANTS.iter().enumerate() {
                samples[w][v].push(run(worker, *variant));
            }
        }
    }
    println!(
        "\n## Process phases (wall clock, median of {} interleaved rounds, µs)\n",
        options.rounds
    );
    print!("| measure |");
    for worker in &options.workers {
        print!(" {} | phase |", worker.display());
    }
    println!();
    print!("| ------- |");
    for _ in &options.workers {
        print!(" ---: | ---: |");
    }
    println!();
    let medians: Vec<Vec<Duration>> = samples
        .iter_mut()
        .map(|rows| rows.iter_mut().map(|s| median(s)).collect())
        .collect();
    for (v, (variant, label)) in VARIANTS.iter().enumerate() {
        print!("| {label} |");
        for worker in &medians {
            let previous = match variant {
                Variant::BinTrue => None,
                Variant::EmptyInput => Some(worker[0]),
                Variant::Initialize => Some(worker[1]),
                Variant::InitializeNoLockdown => Some(worker[2]),
                Variant::FirstResponse => Some(worker[2]),
            };
            let phase = previous.map_or(String::new(), |p| {
                format!(
                    "{:+.1}",
                    worker[v].as_secs_f64() * 1e6 - p.as_secs_f64() * 1e6
                )
            });
            print!(" {} | {phase} |", micros(worker[v]));
        }
        println!();
    }
}

const STEPS: [(&str, Option<BuildStep>); 8] = [
    (
        "`Lua::new_with` (5 standard libraries)",
        Some(BuildStep::LuaState),
    ),
    (
        "string metatable protected, `string.dump` removed",
        Some(BuildStep::StringMetatable),
    ),
    ("globals pruned", Some(BuildStep::Globals)),
    ("SDK table `quirl`", None),
    ("full collection (baseline memory)", None),
    ("meter attached (memory limit, sandbox mode)", None),
    ("lockdown: BPF program compiled", None),
    ("total", None),
];

fn policy() -> Policy {
    Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 4 << 20,
        instruction_limit: 500_000,
        wall_time_ms: 100,
    })
    .expect("policy")
}

/// One VM build as `Vm::new` does it, with the CPU time of each step.
fn build_once(clock: fn() -> Duration) -> Vec<Duration> {
    let policy = policy();
    let mut times = Vec::with_capacity(STEPS.len());
    let start = clock();
    let mark = |times: &mut Vec<Duration>, last: &mut Duration| {
        let now = clock();
        times.push(now - *last);
        *last = now;
    };
    let cancel = Arc::new(AtomicBool::new(false));
    let meter = Arc::new(Meter::new(
        policy.memory_limit_bytes(),
        policy.instruction_limit(),
        Arc::clone(&cancel),
    ));
    let mut steps = Vec::new();
    let built = sandbox::build_observed(&meter, &mut |step| {
        let now = clock();
        steps.push((step, now));
    })
    .expect("sandbox");
    let mut previous = start;
    for (_, at) in &steps {
        times.push(*at - previous);
        previous = *at;
    }
    assert_eq!(
        steps.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        STEPS.iter().filter_map(|(_, s)| *s).collect::<Vec<_>>()
    );
    let mut last = previous;
    let lua = built.lua;
    let state = Arc::new(SdkState {
        meter: Arc::clone(&meter),
        registry: Mutex::new(Registry::default()),
        capabilities: Capabilities {
            allow_process: false,
            process_enabled: false,
            grants: default_grants(false),
        },
        host: Mutex::new(None),
        host_calls: AtomicU32::new(0),
        cwd: String::new(),
        last_config: Mutex::new(None),
    });
    sdk::install(&lua, &state).expect("sdk");
    mark(&mut times, &mut last);
    lua.gc_collect().expect("collect");
    mark(&mut times, &mut last);
    meter.attach(&lua);
    mark(&mut times, &mut last);
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    {
        let filter =
            quirl_lua_reference_worker::lockdown::filter::Filter::build(std::process::id())
                .expect("filter");
        std::hint::black_box(filter.len());
    }
    mark(&mut times, &mut last);
    times.push(clock() - start);
    drop(lua);
    times
}

fn builds(options: &Options) {
    let mut cpu = vec![Vec::with_capacity(options.builds); STEPS.len()];
    let mut wall = vec![Vec::with_capacity(options.builds); STEPS.len()];
    // Warm-up: the first build pays for page faults a worker pays too, but
    // a bench process only once.
    build_once(thread_cpu);
    for round in 0..options.builds {
        let times = if round % 2 == 0 {
            build_once(thread_cpu)
        } else {
            build_once(wall_clock)
        };
        let target = if round % 2 == 0 { &mut cpu } else { &mut wall };
        for (i, t) in times.into_iter().enumerate() {
            target[i].push(t);
        }
    }
    println!(
        "\n## In-process VM build steps (median of {} builds each, µs; this thread's CPU time and wall time, alternating)\n",
        options.builds / 2
    );
    println!("| step | CPU | wall |\n| ---- | ---: | ---: |");
    for (i, (label, _)) in STEPS.iter().enumerate() {
        println!(
            "| {label} | {} | {} |",
            micros(median(&mut cpu[i])),
            micros(median(&mut wall[i]))
        );
    }
}

/// Wall time since the first call (a monotonic clock as a `Duration`).
fn wall_clock() -> Duration {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed()
}

#[cfg(target_os = "linux")]
fn pin(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).expect("sched_setaffinity");
}

#[cfg(not(target_os = "linux"))]
fn pin(cpu: usize) {
    eprintln!("cold_start: --pin {cpu} ignored: pinning is implemented for Linux only");
}

/// The child of [`landlock_domain`]: enter the worker's domain once, print
/// the wall and CPU nanoseconds it took.
#[cfg(target_os = "linux")]
const LANDLOCK_CHILD_ARGUMENT: &str = "--landlock-domain-child";

#[cfg(target_os = "linux")]
fn landlock_child() {
    use quirl_lua_reference_worker::lockdown::landlock;
    let (wall, cpu) = (Instant::now(), thread_cpu());
    let status = landlock::enter_empty_domain().expect("the worker's Landlock domain");
    let (cpu, wall) = (thread_cpu() - cpu, wall.elapsed());
    assert!(status.is_some(), "no domain entered");
    println!("{} {}", wall.as_nanos(), cpu.as_nanos());
}

#[cfg(target_os = "linux")]
fn landlock_domain(options: &Options) {
    use quirl_lua_reference_worker::lockdown::landlock;
    println!("\n## The worker's Landlock domain (lockdown step 4), in a fresh process\n");
    if let Err(why) = landlock::kernel_abi() {
        println!("- skipped: {why}");
        return;
    }
    let exe = std::env::current_exe().expect("the bench binary");
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..options.rounds {
        let output = Command::new(&exe)
            .arg(LANDLOCK_CHILD_ARGUMENT)
            .stdin(Stdio::null())
            .output()
            .expect("the Landlock child");
        assert!(output.status.success(), "{output:?}");
        let text = String::from_utf8(output.stdout).expect("UTF-8");
        let mut words = text.split_whitespace();
        let mut next =
            || Duration::from_nanos(words.next().expect("two numbers").parse().expect("ns"));
        wall.push(next());
        cpu.push(next());
    }
    println!(
        "| step (median of {} processes, µs) | CPU | wall |\n| ---- | ---: | ---: |",
        options.rounds
    );
    println!(
        "| `enter_empty_domain`: create the ruleset (every right of ABI {}), restrict, close | {} | {} |",
        landlock::kernel_abi().unwrap_or(0),
        micros(median(&mut cpu)),
        micros(median(&mut wall))
    );
}

fn main() {
    #[cfg(target_os = "linux")]
    if std::env::args().any(|arg| arg == LANDLOCK_CHILD_ARGUMENT) {
        landlock_child();
        return;
    }
    let options = options();
    if let Some(cpu) = options.pin {
        pin(cpu);
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "# cold start breakdown\n\n- CPUs: {}; load average before: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.trim()
    );
    builds(&options);
    processes(&options);
    #[cfg(target_os = "linux")]
    landlock_domain(&options);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("\n- load average after: {}", load.trim());
}
