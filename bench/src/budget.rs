//! Sections B1 and B2: the instruction budget bounds CPU (DESIGN §15.6) and
//! callbacks end at their own deadline (DESIGN §17.6).
//!
//! B1 runs generated Lua programs (the `lua_programs` fuzz target's
//! grammar, `quirl_lua_testkit::lua_programs`) in-process with its budget and
//! reports the thread CPU time per budget unit; the baseline is a plain
//! `while true do end`, one VM instruction per unit.
//!
//! B2 measures, for a prompt segment declaring 8 ms under a 5 s wall time,
//! the time from the callback's deadline to the caller holding its error:
//! once with the real worker (a Lua loop: the worker's own clock stops it)
//! and once with a scripted worker that never answers (the parent kills it
//! at the deadline plus `CALLBACK_SLACK`).

use std::time::{Duration, Instant};

use quirl_lua_protocol::records::PolicySettings;
use quirl_lua_reference_parent::callback_deadline::CALLBACK_SLACK;
use quirl_lua_reference_parent::{Policy, Worker, WorkerCommand, WorkerConfig};

use crate::inproc::BoxError;
use crate::report::{Row, Summary, Unit, Value};

use quirl_lua_testkit::lua_programs;

/// Deterministic bytes for program `index` (xorshift, no dependency).
fn program_bytes(index: u64) -> Vec<u8> {
    let mut state = index.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let len = 8 + (state % 160) as usize;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// B1's target: the most CPU any generated program may take per budget
/// unit in a release build (the VM issue's 0.1 µs worst case). The fuzz
/// target asserts a far looser bound (`CPU_NS_PER_UNIT_MAX`), since it runs
/// under AddressSanitizer.
const WORST_NS_PER_UNIT: f64 = 100.0;

pub fn b1(programs: u64, notes: &mut Vec<String>) -> Result<Vec<Row>, BoxError> {
    let units = lua_programs::INSTRUCTION_LIMIT as f64;
    let mut per_unit = Vec::new();
    let mut worst = (0.0_f64, 0_u64);
    let mut endings = std::collections::BTreeMap::<String, u64>::new();
    for index in 0..programs {
        let source = lua_programs::program(&program_bytes(index));
        let outcome = lua_programs::run_source(&source);
        lua_programs::check(&source, &outcome);
        let ns = outcome.cpu_ns as f64 / units;
        if ns > worst.0 {
            worst = (ns, index);
        }
        per_unit.push(ns);
        *endings.entry(format!("{:?}", outcome.ending)).or_default() += 1;
    }
    let mut baseline = Vec::new();
    for _ in 0..20 {
        let outcome = lua_programs::run_source("while true do end");
        baseline.push(outcome.cpu_ns as f64 / units);
    }
    let ours = Summary::of_nanos(&mut per_unit).ok_or("no programs")?;
    let base = Summary::of_nanos(&mut baseline).ok_or("no baseline")?;
    notes.push(format!(
        "B1: {programs} generated programs, budget {} units, endings {endings:?}; worst {:.0} ns/unit (program {}); the fuzz target asserts at most {} ns/unit under ASan",
        lua_programs::INSTRUCTION_LIMIT,
        worst.0,
        worst.1,
        lua_programs::CPU_NS_PER_UNIT_MAX
    ));
    Ok(vec![Row {
        id: "B1",
        what: "CPU time per budget unit, generated programs".to_owned(),
        unit: Unit::Time,
        ours: Value {
            p50: ours.p50,
            p99: Some(ours.p99),
        },
        baseline_name: "`while true do end` (1 instruction/unit)".to_owned(),
        baseline: Some(Value::time(base)),
        target: format!("max <= {WORST_NS_PER_UNIT} ns"),
        met: Some(worst.0 <= WORST_NS_PER_UNIT),
    }])
}

fn plugin_file() -> Result<std::path::PathBuf, BoxError> {
    let path = std::env::temp_dir().join(format!("quirl-lua-bench-b2-{}.lua", std::process::id()));
    std::fs::write(
        &path,
        "quirl.prompt.add_segment({ name = 'spin', deadline_ms = 8, render = function() while true do end end })",
    )?;
    Ok(path)
}

/// Time from the segment's 8 ms deadline to the returned error, `n` times,
/// each on a fresh worker (a failed callback retires or kills it).
fn deadline_latency(command: &WorkerCommand, n: usize) -> Result<Vec<Duration>, BoxError> {
    let path = plugin_file()?;
    let source = std::fs::read_to_string(&path)?;
    let _ = std::fs::remove_file(&path);
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms: 5_000,
    })?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let mut worker = Worker::spawn(WorkerConfig::new(command.clone(), policy))?;
        worker.load_plugin(&source, "spin.lua")?;
        let started = Instant::now();
        if worker.render_prompt("spin", serde_json::json!({})).is_ok() {
            return Err("the looping segment returned".into());
        }
        samples.push(started.elapsed().saturating_sub(Duration::from_millis(8)));
    }
    Ok(samples)
}

pub fn b2(
    n: usize,
    worker: &WorkerCommand,
    stuck: &WorkerCommand,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, BoxError> {
    let own = deadline_latency(worker, n)?;
    let killed = deadline_latency(stuck, n)?;
    notes.push(format!(
        "B2: {n} runs each; prompt segment deadline 8 ms, wall time 5000 ms, parent slack {} ms; latency = error returned minus (call start + 8 ms)",
        CALLBACK_SLACK.as_millis()
    ));
    let own_summary = Summary::of(&own).ok_or("no samples")?;
    let killed_summary = Summary::of(&killed).ok_or("no samples")?;
    Ok(vec![
        Row {
            id: "B2",
            what: "callback deadline -> error, Lua loop (worker's own clock)".to_owned(),
            unit: Unit::Time,
            ours: Value::time(own_summary),
            baseline_name: String::new(),
            baseline: None,
            target: String::new(),
            met: None,
        },
        Row {
            id: "B2",
            what: "callback deadline -> error, stuck worker (parent kill)".to_owned(),
            unit: Unit::Time,
            ours: Value::time(killed_summary),
            baseline_name: String::new(),
            baseline: None,
            target: format!("slack {} ms", CALLBACK_SLACK.as_millis()),
            met: None,
        },
    ])
}
