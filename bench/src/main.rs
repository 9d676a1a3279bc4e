//! `quirl-lua-bench`: every X measurement of BENCHMARKS.md in one run,
//! printed side by side with its baseline and the ratio.
//!
//! ```sh
//! cargo build --release -p quirl-lua-cli -p quirl-lua-testkit -p quirl-lua-bench --bins
//! target/x86_64-unknown-linux-gnu/release/quirl-lua-bench            # full run (about a minute)
//! target/x86_64-unknown-linux-gnu/release/quirl-lua-bench --quick    # fewer samples, a smoke test
//! ```
//!
//! Options: `--quick`; `--only X1,X2,…` (sections X1–X6, `L`, the Lua
//! compute rows, `C`, `LL` and `EG`, what the Landlock execute ruleset and
//! the exec guard add to a host command, `B1`/`B2`, the budget and callback-deadline rows,
//! `V`, the metered VM against stock Lua of the same release on whole
//! programs, `T`, the first request after a limit trip with and without a warm
//! spare, `S`, the throughput/latency curve of pools, `M`, a pool on a mix
//! of clean lines and limit trips against the sum of its parts, `R`, a
//! restart in a pool against a cold start, and `H`, the crash of a worker
//! during a host call to the caller's error, both drivers); `--worker "CMD
//! …"` (the worker command; default: the `quirl-lua` binary next to this
//! one with `--internal-lua-worker-v1`; given several times, every section
//! uses the first, and X2, X3, X4 and L are also measured for each command,
//! interleaved round by round, in a side-by-side table: `sidebyside`);
//! `--compare-arg ARG` (repeat the pinned X2 row with ARG appended to the
//! worker command, e.g. `--no-lockdown`); `--kill-source LUA` (what the
//! stuck worker of X4 evaluates); `--containment auto|cgroup|process-group`
//! (how every section's workers are contained; default `auto`). Section `C`
//! measures cold start (X3), a host command and kill latency (X4) in both
//! containment modes side by side, in interleaved blocks (DESIGN §17.2);
//! section `LL` a host command with and without the Landlock execute
//! ruleset (DESIGN §16.6).
//! `--ballast-mib N` allocates and touches N MiB in this process before
//! measuring, to see how spawn cost grows with the host's memory (the
//! "Cold start breakdown" of BENCHMARKS.md).
//!
//! The binary is also its own baseline peer: `--internal-echo N` is the
//! echo child of the ping-pong (see `pingpong`). Not a test: nothing here
//! runs under `cargo test`.

mod alloc;
mod budget;
mod codec;
mod inproc;
mod pingpong;
mod pools;
mod recovery;
mod report;
mod sidebyside;
mod stock_vm;
mod supervise;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use quirl_lua_protocol::FrameDecoder;
use quirl_lua_reference_parent::{Containment, WORKER_ARGUMENT, WorkerCommand, containment_report};

use inproc::{BoxError, Hook};
use report::{Row, Summary, Unit, Value};

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;

/// Default X4 source: one native call the parent must kill. The issue's
/// `table.move({}, 1, math.maxinteger - 1, 2)` is refused up front by the
/// reference worker (native loops are charged before they run, and that one
/// exceeds any instruction budget), so the default moves 90,000,000
/// elements: under the 100,000,000 budget, several seconds of native work.
const KILL_SOURCE: &str = "table.move({}, 1, 90000000, 2)";

/// CPU-bound script of X6 (about 12 M VM instructions).
const POOL_SCRIPT: &str = "local s = 0 for i = 1, 3000000 do s = s + i % 7 end return s";

/// Script of the throughput curve (S): about a millisecond of Lua.
const CURVE_SCRIPT: &str = "local s = 0 for i = 1, 50000 do s = s + i % 7 end return s";

struct Options {
    quick: bool,
    only: Option<Vec<String>>,
    workers: Vec<WorkerCommand>,
    compare_args: Vec<String>,
    kill_source: String,
    ballast_mib: usize,
}

impl Options {
    fn wants(&self, section: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|s| s.eq_ignore_ascii_case(section)))
    }

    /// Scale a sample count down for `--quick`.
    fn n(&self, full: usize) -> usize {
        if self.quick {
            (full / 10).max(20)
        } else {
            full
        }
    }
}

fn parse() -> Result<Options, BoxError> {
    let mut options = Options {
        quick: false,
        only: None,
        workers: Vec::new(),
        compare_args: Vec::new(),
        kill_source: KILL_SOURCE.to_owned(),
        ballast_mib: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--only" => {
                let list = args.next().ok_or("--only needs a list")?;
                options.only = Some(list.split(',').map(|s| s.trim().to_owned()).collect());
            }
            "--worker" => {
                let line = args.next().ok_or("--worker needs a command")?;
                options.workers.push(WorkerCommand::parse(&line)?);
            }
            "--compare-arg" => {
                options
                    .compare_args
                    .push(args.next().ok_or("--compare-arg needs an argument")?);
            }
            "--kill-source" => {
                options.kill_source = args.next().ok_or("--kill-source needs Lua")?;
            }
            "--ballast-mib" => {
                options.ballast_mib = args
                    .next()
                    .ok_or("--ballast-mib needs a size in MiB")?
                    .parse()?;
            }
            "--containment" => {
                let mode: Containment = args
                    .next()
                    .ok_or("--containment needs auto, cgroup or process-group")?
                    .parse()?;
                let _ = supervise::CONTAINMENT.set(mode);
            }
            "-h" | "--help" => {
                println!(
                    "quirl-lua-bench [--quick] [--only X1,X2,X3,X4,X5,X6,L,C,LL,EG,B1,B2,T,S,M,R,H] [--worker CMD]... \
                     [--compare-arg ARG] [--kill-source LUA] [--containment MODE] [--ballast-mib N]\n\
                     --worker may be given several times: every section uses the first; \
                     X2, X3, X4 and L are then also measured for each, interleaved, in a side-by-side table"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(options)
}

/// A sibling binary of this executable.
fn sibling(name: &str) -> Result<std::path::PathBuf, BoxError> {
    let exe = std::env::current_exe()?;
    let path = exe.with_file_name(name);
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found; build it with `cargo build --release -p quirl-lua-cli -p quirl-lua-reference-worker -p quirl-lua-testkit --bins`",
            path.display()
        )
        .into())
    }
}

fn default_worker() -> Result<WorkerCommand, BoxError> {
    Ok(WorkerCommand::new(sibling("quirl-lua")?).arg(WORKER_ARGUMENT))
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some(pingpong::ECHO_ARGUMENT) {
        let size = args.next().and_then(|n| n.parse().ok()).unwrap_or(64);
        return match pingpong::echo_main(size) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("quirl-lua-bench: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), BoxError> {
    let options = parse()?;
    // Host memory a spawn might have to copy page tables of; touched so
    // every page is mapped, kept alive (and read at the end) for the run.
    let ballast = vec![1_u8; options.ballast_mib << 20];
    let needs_worker = [
        "X2", "X3", "X4", "X5", "X6", "L", "C", "B2", "T", "S", "M", "R", "H",
    ]
    .iter()
    .any(|section| options.wants(section));
    let worker = match options.workers.first() {
        Some(worker) => worker.clone(),
        None if needs_worker => default_worker()?,
        None => WorkerCommand::new("quirl-lua").arg(WORKER_ARGUMENT),
    };
    // Record the CPUs we may use before any section pins this thread.
    let cpus = pingpong::all_cpus();
    let started = Instant::now();
    println!("# quirl-lua-bench");
    println!();
    println!("- machine: {}", report::machine());
    println!("- worker: `{worker}`; CPUs available: {cpus:?}");
    for (index, other) in options.workers.iter().enumerate().skip(1) {
        println!("- worker {}: `{other}` (side-by-side table)", index + 1);
    }
    let chosen = supervise::CONTAINMENT.get().copied().unwrap_or_default();
    println!("- containment: {}", containment_report(chosen).summary());
    if options.ballast_mib > 0 {
        println!(
            "- ballast: {} MiB touched in this process",
            options.ballast_mib
        );
    }
    println!(
        "- mode: {}",
        if options.quick {
            "quick (fewer samples)"
        } else {
            "full"
        }
    );
    println!();
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    if options.wants("X1") {
        let budget = if options.quick {
            Duration::from_millis(150)
        } else {
            Duration::from_millis(1_000)
        };
        rows.extend(codec::run(budget)?);
    }
    if options.wants("X2") {
        rows.extend(x2(&options, &worker, &mut notes)?);
    }
    if options.wants("X3") {
        rows.extend(x3(&options, &worker)?);
    }
    if options.wants("X4") {
        rows.extend(x4(&options, &worker, &mut notes)?);
    }
    if options.wants("X5") {
        rows.extend(x5(&worker, &mut notes)?);
    }
    if options.wants("X6") {
        rows.extend(x6(&options, &worker, &mut notes)?);
    }
    if options.wants("L") {
        rows.extend(lua_compute(&options, &worker)?);
    }
    if options.wants("V") {
        rows.extend(stock_vm::v(
            &sibling("quirl-lua")?,
            if options.quick { 3 } else { 10 },
            &mut notes,
        )?);
    }
    if options.wants("T") {
        rows.extend(trip_latency(&options, &worker, &mut notes)?);
    }
    if options.wants("M") {
        let (lines, rounds) = if options.quick { (200, 3) } else { (2_000, 5) };
        rows.extend(recovery::mix(&worker, lines, rounds, &mut notes)?);
    }
    if options.wants("R") {
        rows.extend(recovery::restart(&worker, options.n(50), &mut notes)?);
    }
    if options.wants("H") {
        rows.extend(recovery::host_call_crash(
            &worker,
            options.n(20),
            &mut notes,
        )?);
    }
    let curve = if options.wants("S") {
        Some(throughput_curve(&options, &worker)?)
    } else {
        None
    };
    let side_by_side = (options.workers.len() > 1).then(|| {
        let started = report::load();
        let rows = sidebyside::run(&options, &options.workers);
        let note = format!(
            "{} rounds, commands interleaved within each round; ratio = median over rounds of the per-round median ratio; {started} at the start, {} at the end",
            if options.quick { 3 } else { 10 },
            report::load()
        );
        sidebyside::render(&rows, &options.workers, &note)
    });
    if options.wants("C") {
        rows.extend(containment_costs(&options, &worker, &mut notes)?);
    }
    if options.wants("LL") {
        rows.extend(landlock_costs(&options, &mut notes)?);
    }
    if options.wants("EG") {
        rows.extend(exec_guard_costs(&options, &mut notes)?);
    }
    if options.wants("B1") {
        rows.extend(budget::b1(
            if options.quick { 200 } else { 2_000 },
            &mut notes,
        )?);
    }
    if options.wants("B2") {
        let stuck = WorkerCommand::new(sibling("quirl-lua-fake-worker")?).arg("plugin-then-hang");
        rows.extend(budget::b2(options.n(200), &worker, &stuck, &mut notes)?);
    }
    print!("{}", report::render(&rows));
    println!();
    if let Some(curve) = curve {
        println!("{curve}");
    }
    if let Some(table) = side_by_side {
        println!("Side by side:");
        println!();
        println!("{table}");
    }
    for note in notes {
        println!("- {note}");
    }
    println!(
        "- finished in {:.1} s; {}",
        started.elapsed().as_secs_f64(),
        report::load()
    );
    std::hint::black_box(&ballast);
    Ok(())
}

fn time_row(
    id: &'static str,
    what: impl Into<String>,
    ours: &[Duration],
    baseline_name: &str,
    baseline: Option<&[Duration]>,
    target: Option<f64>,
) -> Result<Row, BoxError> {
    let ours = Summary::of(ours).ok_or("no samples")?;
    let base = baseline.and_then(Summary::of);
    let met = match (target, base) {
        (Some(target), Some(base)) => Some(ours.p50 / base.p50 <= target),
        _ => None,
    };
    Ok(Row {
        id,
        what: what.into(),
        unit: Unit::Time,
        ours: Value::time(ours),
        baseline_name: baseline_name.to_owned(),
        baseline: base.map(Value::time),
        target: target.map_or_else(String::new, |t| format!("<= {t}x")),
        met,
    })
}

fn x2(
    options: &Options,
    worker: &WorkerCommand,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, BoxError> {
    let n = options.n(20_000);
    let warmup = options.n(2_000);
    let mut rows = Vec::new();
    // Representative id: the middle of the measured requests.
    let (request, response) = supervise::return_one_frames((warmup + n / 2) as u64)?;
    notes.push(format!(
        "X2 frame sizes (header included): request {} B, response {} B",
        request.len(),
        response.len()
    ));
    for (pinned, label) in [(true, "pinned to one CPU"), (false, "unpinned")] {
        if pinned {
            pingpong::set_affinity(&[0])?;
        } else {
            pingpong::set_affinity(&pingpong::all_cpus())?;
        }
        let base =
            pingpong::Echo::spawn(request.clone(), response.len())?.measure(false, warmup, n)?;
        let patterned =
            pingpong::Echo::spawn(request.clone(), response.len())?.measure(true, warmup, n)?;
        let ours = supervise::warm_round_trips(worker, warmup, n)?;
        notes.push(format!(
            "X2 {label}: worker CPUs {:?}, echo child CPUs {:?}",
            ours.peer_cpus, base.peer_cpus
        ));
        for (name, trips) in [
            ("ping-pong", &base),
            ("ping-pong with the parent's system calls", &patterned),
            ("warm eval", &ours),
        ] {
            notes.push(format!(
                "X2 {label}, {name}: CPU per round trip: parent {}, peer {}; parent heap allocations per round trip: {:.1}",
                report::format_time(trips.own_cpu_ns),
                report::format_time(trips.peer_cpu_ns),
                trips.allocations
            ));
        }
        rows.push(time_row(
            "X2",
            format!("warm eval \"return 1\", {label}"),
            &ours.samples,
            "pipe ping-pong",
            Some(&base.samples),
            pinned.then_some(2.0),
        )?);
        rows.push(time_row(
            "X2",
            format!("ping-pong with the parent's system calls, {label}"),
            &patterned.samples,
            "pipe ping-pong",
            Some(&base.samples),
            None,
        )?);
        if pinned {
            for arg in &options.compare_args {
                let command = worker.clone().arg(arg);
                let with_arg = supervise::warm_round_trips(&command, warmup, n)?;
                rows.push(time_row(
                    "X2",
                    format!("warm eval \"return 1\", {label}, worker {arg}"),
                    &with_arg.samples,
                    "pipe ping-pong",
                    Some(&base.samples),
                    Some(2.0),
                )?);
            }
        }
    }
    pingpong::set_affinity(&pingpong::all_cpus())?;
    // In-process: what the process boundary costs.
    let mut vm = inproc::sandbox_vm(supervise::policy()?)?;
    let sandbox = inproc::sample(warmup, n, || {
        inproc::sandbox_eval(&mut vm, "return 1").map(drop)
    })?;
    let lua = mlua::Lua::new();
    let plain = inproc::sample(warmup, n, || inproc::plain_eval(&lua, "return 1"))?;
    let mut id = 1_u64;
    let codec = inproc::sample(warmup, n, || {
        id += 1;
        inproc::codec_round(id)
    })?;
    rows.push(time_row(
        "X2",
        "in-process sandbox VM eval \"return 1\" (no IPC)",
        &sandbox,
        "plain mlua eval",
        Some(&plain),
        None,
    )?);
    rows.push(time_row(
        "X2",
        "in-process codec: encode+decode request and response",
        &codec,
        "",
        None,
        None,
    )?);
    Ok(rows)
}

fn x3(options: &Options, worker: &WorkerCommand) -> Result<Vec<Row>, BoxError> {
    let n = options.n(200);
    let base = supervise::bin_true(n)?;
    let (initialized, answered) = supervise::cold_starts(worker, n)?;
    let mut rows = vec![
        time_row(
            "X3",
            "cold start: spawn -> initialize -> first response",
            &answered,
            "spawn /bin/true",
            Some(&base),
            Some(3.0),
        )?,
        time_row(
            "X3",
            "cold start: spawn -> initialize answered",
            &initialized,
            "spawn /bin/true",
            Some(&base),
            None,
        )?,
    ];
    // In-process: what building the VM costs, without a process.
    let policy = supervise::policy()?;
    let build = inproc::sample(2, n, || inproc::sandbox_vm(policy).map(drop))?;
    let plain = inproc::sample(2, n, || {
        drop(mlua::Lua::new());
        Ok(())
    })?;
    rows.push(time_row(
        "X3",
        "in-process sandbox VM build (no process)",
        &build,
        "plain mlua Lua::new()",
        Some(&plain),
        None,
    )?);
    if let Ok(path) = sibling("quirl-worker") {
        let small = WorkerCommand::new(path);
        let (_, answered) = supervise::cold_starts(&small, n)?;
        rows.push(time_row(
            "X3",
            "cold start, quirl-worker binary",
            &answered,
            "spawn /bin/true",
            Some(&base),
            Some(3.0),
        )?);
    }
    Ok(rows)
}

fn x4(
    options: &Options,
    worker: &WorkerCommand,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, BoxError> {
    let n = if options.quick { 40 } else { 200 };
    let wall_ms = 20;
    let samples = supervise::kill_latency(worker, &options.kill_source, wall_ms, n)?;
    // The operating system's floor: SIGKILL + reap of an idle child.
    let mut floor = Vec::with_capacity(n);
    for _ in 0..n {
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("10")
            .stdin(std::process::Stdio::null())
            .spawn()?;
        std::thread::sleep(Duration::from_millis(1));
        let started = Instant::now();
        child.kill()?;
        child.wait()?;
        floor.push(started.elapsed());
    }
    notes.push(format!(
        "X4: {n} runs, source `{}`, wall_time_ms {wall_ms}; latency = return of the failed call (killed, reaped, pipe drained) minus the deadline",
        options.kill_source
    ));
    let summary = Summary::of(&samples).ok_or("no samples")?;
    let mut row = time_row(
        "X4",
        "deadline -> worker killed and reaped (stuck in native code)",
        &samples,
        "kill+reap of idle /bin/sleep",
        Some(&floor),
        None,
    )?;
    row.target = "p99 <= 5 ms".to_owned();
    row.met = Some(summary.p99 <= 5_000_000.0);
    Ok(vec![row])
}

/// Section C: what a cgroup per child costs, against process groups, in
/// one run. Blocks of 10 alternate between the modes so load drifts hit
/// both alike.
fn containment_costs(
    options: &Options,
    worker: &WorkerCommand,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, BoxError> {
    let report = containment_report(Containment::Auto);
    if report.cgroup.is_none() {
        notes.push(format!(
            "C: skipped, no writable cgroup v2 ({})",
            report.summary()
        ));
        return Ok(Vec::new());
    }
    let n = options.n(200);
    let kill_n = if options.quick { 40 } else { 200 };
    let block = 10;
    let modes = [Containment::ProcessGroup, Containment::Cgroup];
    let mut cold: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut host: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut kill: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for round in 0..n.div_ceil(block) {
        for (index, mode) in modes.iter().enumerate() {
            cold[index].extend(supervise::cold_starts_in(worker, block, *mode)?.1);
            host[index].extend(supervise::host_commands_in("true", block, *mode)?);
            if round * block < kill_n {
                kill[index].extend(supervise::kill_latency_in(
                    worker,
                    &options.kill_source,
                    20,
                    block,
                    *mode,
                )?);
            }
        }
    }
    notes.push(format!(
        "C: ours = cgroup mode, baseline = process-group mode, interleaved in blocks of {block}; cgroup: {}",
        report.summary()
    ));
    Ok(vec![
        time_row(
            "C/X3",
            "cold start (spawn -> first response), cgroup per worker",
            &cold[1],
            "process-group mode",
            Some(&cold[0]),
            None,
        )?,
        time_row(
            "C",
            "host command `true` (spawn, capture, reap), cgroup per command",
            &host[1],
            "process-group mode",
            Some(&host[0]),
            None,
        )?,
        time_row(
            "C/X4",
            "deadline -> worker killed and reaped, cgroup.kill + rmdir",
            &kill[1],
            "process-group mode",
            Some(&kill[0]),
            None,
        )?,
    ])
}

/// Section LL: what the Landlock execute ruleset adds to a host command's
/// start (DESIGN §16.6): `true` granted by name (ruleset built before the
/// fork, applied in the child) against the unscoped grant (no ruleset), in
/// one run, blocks of 10 alternating, process-group mode so no cgroup
/// migration blurs the difference.
fn landlock_costs(options: &Options, notes: &mut Vec<String>) -> Result<Vec<Row>, BoxError> {
    let support = quirl_lua_reference_parent::process_host::landlock_support();
    if !support.available() {
        notes.push(format!("LL: skipped, {}", support.summary()));
        return Ok(Vec::new());
    }
    let n = options.n(400);
    let block = 10;
    let grants = ["process.spawn", "process.spawn:true"];
    let mut host: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..n.div_ceil(block) {
        for (index, grant) in grants.iter().enumerate() {
            host[index].extend(supervise::host_commands_granted(
                "true",
                grant,
                block,
                Containment::ProcessGroup,
            )?);
        }
    }
    notes.push(format!(
        "LL: ours = `process.spawn:true` (Landlock execute ruleset), baseline = `process.spawn` (none), interleaved in blocks of {block}, process-group mode; {}",
        support.summary()
    ));
    Ok(vec![time_row(
        "LL",
        "host command `true` (spawn, capture, reap) under the Landlock execute ruleset",
        &host[1],
        "no ruleset (unscoped grant)",
        Some(&host[0]),
        None,
    )?])
}

/// Section EG: what the exec guard adds to a host command's start (DESIGN
/// §16.6): `true` granted by name (the guard's filter installed in the
/// child, its listener sent to the parent, the one exec let through, and
/// the Landlock execute ruleset) against the unscoped grant (neither), in
/// one run, blocks of 10 alternating, process-group mode; both with the
/// rest of a command's containment (its PID namespace and init, private
/// directory, write domain). A second row: what a command's process limit
/// costs where it needs a cgroup v1 `pids` cgroup of its own (the
/// unscoped grant with and without `--command-pids-max`).
fn exec_guard_costs(options: &Options, notes: &mut Vec<String>) -> Result<Vec<Row>, BoxError> {
    use quirl_lua_reference_parent::process_host::{DEFAULT_COMMAND_PIDS_MAX, exec_guard_support};
    if let Err(why) = exec_guard_support() {
        notes.push(format!("EG: skipped, {why}"));
        return Ok(Vec::new());
    }
    let n = options.n(400);
    let block = 10;
    let variants = [
        ("process.spawn", None),
        ("process.spawn:true", None),
        ("process.spawn", Some(DEFAULT_COMMAND_PIDS_MAX)),
    ];
    let mut host: [Vec<Duration>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..n.div_ceil(block) {
        for (index, (grant, pids_max)) in variants.iter().enumerate() {
            host[index].extend(supervise::host_commands_limited(
                "true",
                grant,
                block,
                Containment::ProcessGroup,
                *pids_max,
            )?);
        }
    }
    let report = containment_report(Containment::ProcessGroup);
    notes.push(format!(
        "EG: interleaved in blocks of {block}, process-group mode; exec guard: {}; pid namespace: {}; command pids limit: {}",
        report.exec_guard, report.pid_namespace, report.command_pids_limit
    ));
    Ok(vec![
        time_row(
            "EG",
            "host command `true` granted by name: exec guard + execute ruleset",
            &host[1],
            "unscoped grant (neither)",
            Some(&host[0]),
            None,
        )?,
        time_row(
            "EG/pids",
            "host command `true` with --command-pids-max (its pids cgroup)",
            &host[2],
            "no process limit",
            Some(&host[0]),
            None,
        )?,
    ])
}

fn x5(worker: &WorkerCommand, notes: &mut Vec<String>) -> Result<Vec<Row>, BoxError> {
    let mut rows = Vec::new();
    // Hostile header: 5 MiB declared, 10 bytes sent.
    let mut decoder = FrameDecoder::new();
    let base = alloc::reset_peak();
    let mut hostile = 5_242_880_u32.to_be_bytes().to_vec();
    hostile.extend_from_slice(b"{\"kind\":\"r");
    let fed = decoder.feed(&hostile);
    let peak = alloc::peak().saturating_sub(base);
    if !matches!(fed, Ok(quirl_lua_protocol::Feed::NeedMore)) {
        return Err(format!("hostile header: unexpected decoder result {fed:?}").into());
    }
    drop(decoder);
    rows.push(Row {
        id: "X5",
        what: "decoder heap, 5 MiB header + 10 bytes".to_owned(),
        unit: Unit::Bytes,
        ours: Value::single(peak as f64),
        baseline_name: "zero-filled declared length".to_owned(),
        baseline: Some(Value::single(5_242_880.0)),
        target: "<= 64 KiB".to_owned(),
        met: Some(peak <= 64 * 1024),
    });
    // Idle RSS of an initialized worker, against an idle Rust process (the
    // echo child: this binary, blocked in read).
    let echo = pingpong::Echo::spawn(vec![0, 0, 0, 1, b'x'], 8)?;
    std::thread::sleep(Duration::from_millis(50));
    let echo_rss = supervise::rss_of(&echo.pid().to_string())?;
    drop(echo);
    let rss = supervise::idle_worker_rss(worker)?;
    rows.push(Row {
        id: "X5",
        what: "idle worker RSS (quirl-lua --internal-lua-worker-v1)".to_owned(),
        unit: Unit::Bytes,
        ours: Value::single(rss as f64),
        baseline_name: "idle Rust process".to_owned(),
        baseline: Some(Value::single(echo_rss as f64)),
        target: "<= 8 MiB".to_owned(),
        met: Some(rss <= 8 << 20),
    });
    if let Ok(path) = sibling("quirl-worker") {
        let rss = supervise::idle_worker_rss(&WorkerCommand::new(path))?;
        rows.push(Row {
            id: "X5",
            what: "idle worker RSS (quirl-worker)".to_owned(),
            unit: Unit::Bytes,
            ours: Value::single(rss as f64),
            baseline_name: "idle Rust process".to_owned(),
            baseline: Some(Value::single(echo_rss as f64)),
            target: "<= 8 MiB".to_owned(),
            met: Some(rss <= 8 << 20),
        });
    }
    let size = 8;
    let (rss_per, heap_per) = supervise::parent_cost_per_worker(worker, size)?;
    rows.push(Row {
        id: "X5",
        what: format!("parent RSS per pooled worker (pool of {size})"),
        unit: Unit::Bytes,
        ours: Value::single(rss_per),
        baseline_name: "parent heap per worker".to_owned(),
        baseline: Some(Value::single(heap_per)),
        target: String::new(),
        met: None,
    });
    notes.push(
        "X5: RSS from /proc/PID/status VmRSS; heap from this binary's counting allocator"
            .to_owned(),
    );
    Ok(rows)
}

/// X6: a pool of 2 against a pool of 1 (two callers, CPU-bound evals), and
/// the same ratio without a pool (two independent workers on two threads
/// against one), in interleaved rounds: the ceiling the machine allows.
fn x6(
    options: &Options,
    worker: &WorkerCommand,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, BoxError> {
    let calls = if options.quick { 2 } else { 4 };
    let rounds = if options.quick { 2 } else { 9 };
    let (mut pool_ratios, mut ceiling_ratios) = (Vec::new(), Vec::new());
    let (mut ones, mut twos, mut singles, mut pairs) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // ABBA: the pool pair and the no-pool pair swap order every round.
        let (one, two, single, pair) = if round % 2 == 0 {
            let one = pools::pool_rate(worker, 1, 2, calls, POOL_SCRIPT)?.0;
            let two = pools::pool_rate(worker, 2, 2, calls, POOL_SCRIPT)?.0;
            let pair = pools::independent_rate(worker, 2, calls, POOL_SCRIPT)?;
            let single = pools::independent_rate(worker, 1, 2 * calls, POOL_SCRIPT)?;
            (one, two, single, pair)
        } else {
            let single = pools::independent_rate(worker, 1, 2 * calls, POOL_SCRIPT)?;
            let pair = pools::independent_rate(worker, 2, calls, POOL_SCRIPT)?;
            let two = pools::pool_rate(worker, 2, 2, calls, POOL_SCRIPT)?.0;
            let one = pools::pool_rate(worker, 1, 2, calls, POOL_SCRIPT)?.0;
            (one, two, single, pair)
        };
        pool_ratios.push(two / one);
        ceiling_ratios.push(pair / single);
        ones.push(one);
        twos.push(two);
        singles.push(single);
        pairs.push(pair);
    }
    let median = |values: &[f64]| {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted[sorted.len() / 2]
    };
    let list = |values: &[f64]| {
        values
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let pool = median(&pool_ratios);
    let ceiling = median(&ceiling_ratios);
    notes.push(format!(
        "X6: {rounds} rounds of 2 callers x {calls} calls, pool and no-pool pairs in ABBA order; pool ratios {}; ceiling ratios (independent workers, no pool) {}; median pool ratio / median ceiling ratio {:.2}",
        list(&pool_ratios),
        list(&ceiling_ratios),
        pool / ceiling
    ));
    // Rates shown are medians; a row's ratio column is the median of the
    // per-round ratios, so the upper rate is shown as baseline x ratio.
    let one = median(&ones);
    let single = median(&singles);
    Ok(vec![
        Row {
            id: "X6",
            what: format!(
                "CPU-bound evals/s, pool of 2 (2 callers x {calls}), median of {rounds} rounds"
            ),
            unit: Unit::Rate,
            ours: Value::single(one * pool),
            baseline_name: "pool of 1".to_owned(),
            baseline: Some(Value::single(one)),
            target: ">= 1.8x".to_owned(),
            met: Some(pool >= 1.8),
        },
        Row {
            id: "X6",
            what: format!("ceiling: 2 workers on 2 threads, no pool (median of {rounds} rounds)"),
            unit: Unit::Rate,
            ours: Value::single(single * ceiling),
            baseline_name: "1 worker, 1 thread".to_owned(),
            baseline: Some(Value::single(single)),
            target: String::new(),
            met: None,
        },
    ])
}

/// T: the first request after a limit trip, on a pool of one with and
/// without a warm spare, against a warm round trip on the same pool;
/// trials alternate between the two pools.
fn trip_latency(
    options: &Options,
    worker: &WorkerCommand,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, BoxError> {
    let trials = options.n(100);
    let mut with = pools::TripPool::start(worker, 1)?;
    let mut without = pools::TripPool::start(worker, 0)?;
    let mut spare = pools::TripLatency::default();
    let mut cold = pools::TripLatency::default();
    for _ in 0..trials {
        with.trial(&mut spare)?;
        without.trial(&mut cold)?;
    }
    with.finish()?;
    without.finish()?;
    notes.push(format!(
        "T: {trials} trials per pool (size 1, instruction limit 100,000; `while true do end` trips it), alternating; each trial waits until the pool is at rest (spare ready, the swapped-out worker checked), warms the member (20 calls), times one warm call back to back and one after {} ms idle, trips it, then times the next `eval \"return 1\"`", pools::IDLE.as_millis()
    ));
    let idle_ms = pools::IDLE.as_millis();
    let rows = vec![
        time_row(
            "T",
            "first request after a limit trip, 1 warm spare",
            &spare.first,
            &format!("warm round trip after {idle_ms} ms idle"),
            Some(&spare.idle),
            Some(2.0),
        )?,
        time_row(
            "T",
            "first request after a limit trip, 1 warm spare",
            &spare.first,
            "warm round trip, back to back",
            Some(&spare.warm),
            None,
        )?,
        time_row(
            "T",
            "first request after a limit trip, no spare",
            &cold.first,
            "warm round trip, back to back",
            Some(&cold.warm),
            None,
        )?,
        time_row(
            "T",
            format!("warm round trip after {idle_ms} ms idle (pool without spare)"),
            &cold.idle,
            "warm round trip, back to back",
            Some(&cold.warm),
            None,
        )?,
        time_row(
            "T",
            "first request after a limit trip: spare / no spare",
            &spare.first,
            "no spare",
            Some(&cold.first),
            None,
        )?,
    ];
    Ok(rows)
}

/// S: requests/s and latency of 1–8 callers on pools of 1, 2 and 4
/// (CURVE_SCRIPT, about a millisecond of Lua), pool sizes interleaved for
/// each caller count.
fn throughput_curve(options: &Options, worker: &WorkerCommand) -> Result<String, BoxError> {
    use std::fmt::Write as _;
    let sizes = [1_usize, 2, 4];
    let calls = if options.quick { 5 } else { 40 };
    let mut cells = Vec::new();
    for callers in 1..=8 {
        for size in sizes {
            let (rate, latencies) = pools::curve_cell(worker, size, callers, calls, CURVE_SCRIPT)?;
            let summary = Summary::of(&latencies).ok_or("no samples")?;
            cells.push((callers, size, rate, summary));
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Throughput/latency curve (S): `{CURVE_SCRIPT}`, {calls} calls per caller; requests/s, p50 / p99 per call"
    );
    let _ = writeln!(out);
    let _ = write!(out, "| callers |");
    for size in sizes {
        let _ = write!(out, " pool {size}: req/s | p50 | p99 |");
    }
    let _ = writeln!(out);
    let _ = write!(out, "| ---: |");
    for _ in sizes {
        let _ = write!(out, " ---: | ---: | ---: |");
    }
    let _ = writeln!(out);
    for callers in 1..=8 {
        let _ = write!(out, "| {callers} |");
        for (_, _, rate, summary) in cells.iter().filter(|cell| cell.0 == callers) {
            let _ = write!(
                out,
                " {rate:.0} | {} | {} |",
                report::format_time(summary.p50),
                report::format_time(summary.p99)
            );
        }
        let _ = writeln!(out);
    }
    Ok(out)
}

fn lua_compute(options: &Options, worker: &WorkerCommand) -> Result<Vec<Row>, BoxError> {
    let n = if options.quick { 5 } else { 30 };
    let hooks = [
        Hook::None,
        Hook::Raw(1_000),
        Hook::Mlua(1_000),
        Hook::MluaClock(1_000),
        Hook::Mlua(10_000),
        Hook::Mlua(1_000_000),
    ];
    let mut plain = Vec::new();
    for hook in hooks {
        plain.push((hook, inproc::plain_fib(hook)?));
    }
    let mut vm = inproc::sandbox_vm(supervise::policy()?)?;
    let mut live = quirl_lua_reference_parent::Worker::spawn(supervise::config(worker)?)?;
    // Variants run round-robin, one fib each per round, so that changes in
    // machine load hit every variant alike.
    let variants = plain.len() + 2;
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); variants];
    for round in 0..n + 2 {
        for (index, series) in samples.iter_mut().enumerate() {
            let started = Instant::now();
            if let Some((_, (_lua, function))) = plain.get(index) {
                inproc::run_fib(function)?;
            } else if index == plain.len() {
                let value = inproc::sandbox_eval(&mut vm, inproc::FIB_SOURCE)?;
                if value != serde_json::json!(inproc::FIB_RESULT) {
                    return Err(format!("sandbox fib returned {value}").into());
                }
            } else {
                let value = live.eval(inproc::FIB_SOURCE)?;
                if value != serde_json::json!(inproc::FIB_RESULT) {
                    return Err(format!("worker fib returned {value}").into());
                }
            }
            let elapsed = started.elapsed();
            // The first two rounds warm up.
            if round >= 2 {
                series.push(elapsed);
            }
        }
    }
    live.shutdown()?;
    let base = samples[0].clone();
    let mut rows = Vec::new();
    for (index, series) in samples.iter().enumerate() {
        let what = match plain.get(index) {
            Some((hook, _)) => format!("fib(27): {}", hook.describe()),
            None if index == plain.len() => {
                "fib(27): sandbox VM in-process (budget hook every 1000)".to_owned()
            }
            None => "fib(27): eval through the worker process".to_owned(),
        };
        rows.push(time_row(
            "L",
            what,
            series,
            "plain mlua, no hook",
            Some(&base),
            None,
        )?);
    }
    Ok(rows)
}
