//! What `check` costs on a 10,000-line source (BENCHMARKS.md, "check: the
//! lint"): Lua's own compile, full_moon's parse, the whole lint, and the
//! `check` operation through the VM with and without the report, side by
//! side, interleaved round by round.
//!
//! ```sh
//! cargo bench -p quirl-lua-reference-worker --bench check
//! cargo bench -p quirl-lua-reference-worker --bench check -- --write /tmp/check10k.lua   # the input, for `quirl-lua check`
//! ```
//!
//! Options: `--rounds N` (default 30), `--write PATH` (write the input and
//! exit). The input is the benchmark programs of `bench/lua/` and the
//! pattern harness of `fixtures/lua/`, each wrapped as a function stored in
//! a table, repeated until 10,000 lines: code that runs in the sandbox, with no
//! error to find (the lint reads all of it and reports its warnings). Each
//! row is timed with the wall clock and this thread's CPU clock; the table
//! gives medians. Run by `cargo test --all-targets` with no `--bench`
//! argument: then two rounds, as a smoke test.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use quirl_lua_protocol::records::{
    CHECK_DIAGNOSTICS_GRANT, Operation, Policy, PolicySettings, Severity,
};
use quirl_lua_reference_worker::lint::{self, Environment};
use quirl_lua_reference_worker::{Verdict, Vm, VmConfig};
use rustix::time::{ClockId, clock_gettime};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// Lines of the input.
const LINES: usize = 10_000;

fn input() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut programs: Vec<String> = std::fs::read_dir(root.join("bench/lua"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "lua"))
        .chain([root.join("fixtures/lua/pattern_differential_harness.lua")])
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect();
    programs.sort();
    // Into a table: a function may hold at most 200 locals.
    let mut source = String::from("local programs = {}\n");
    let mut lines = 1;
    let mut n = 0;
    'fill: loop {
        for program in &programs {
            let wrapped = format!("programs[{n}] = function(...)\n{program}\nend\n");
            let more = wrapped.lines().count();
            if lines + more > LINES - 1 {
                break 'fill;
            }
            n += 1;
            source.push_str(&wrapped);
            lines += more;
        }
    }
    // The last few lines: one short statement each.
    while lines < LINES - 1 {
        source.push_str(&format!("programs[#programs + 1] = \"line {lines}\"\n"));
        lines += 1;
    }
    source.push_str("return programs\n");
    source
}

fn cpu_now() -> Duration {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

fn vm(report: bool) -> Vm {
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms: 5_000,
    })
    .unwrap();
    let mut grants = vec!["prompt.register".to_owned()];
    if report {
        grants.push(CHECK_DIAGNOSTICS_GRANT.to_owned());
    }
    Vm::new(
        &VmConfig {
            policy,
            grants: Some(grants),
            process_enabled: false,
        },
        Arc::new(AtomicBool::new(false)),
        None,
    )
    .unwrap()
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let source = input();
    if let Some(at) = args.iter().position(|arg| arg == "--write") {
        let path = args.get(at + 1).expect("--write PATH");
        std::fs::write(path, &source).unwrap();
        println!(
            "wrote {} lines, {} bytes to {path}",
            source.lines().count(),
            source.len()
        );
        return;
    }
    let benching = args.iter().any(|arg| arg == "--bench");
    let rounds = args
        .iter()
        .position(|arg| arg == "--rounds")
        .and_then(|at| args.get(at + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(if benching { 30 } else { 2 });

    let env = Environment::for_grants(&HashSet::from(["prompt.register".to_owned()])).unwrap();
    let findings = lint::lint(&source, &env);
    let errors = findings
        .iter()
        .filter(|finding| finding.severity == Severity::Error)
        .count();
    assert_eq!(errors, 0, "the input runs in the sandbox: no error to find");
    let plain = mlua::Lua::new();
    let mut with_report = vm(true);
    let mut without = vm(false);
    let check = |vm: &mut Vm| {
        let verdict = vm.handle(Operation::Check {
            source: source.clone(),
            source_name: "check10k.lua".to_owned(),
        });
        assert!(matches!(verdict, Verdict::Success(_)), "{verdict:?}");
    };

    const ROWS: [&str; 6] = [
        "Lua's compile (plain mlua state)",
        "full_moon parse, tree freed",
        "lint (parse, walk, rules), tree freed",
        "lint, tree freed after the timing",
        "check, Quirl 0.1 wire (compile + lint)",
        "check with the report (compile + lint + report)",
    ];
    let mut wall: Vec<Vec<Duration>> = vec![Vec::new(); ROWS.len()];
    let mut cpu: Vec<Vec<Duration>> = vec![Vec::new(); ROWS.len()];
    for _ in 0..rounds {
        for index in 0..ROWS.len() {
            let (started, cpu_started) = (Instant::now(), cpu_now());
            // What each row leaves to free after its timing (as the worker
            // frees check's tree after its answer: `Vm::release_deferred`).
            let mut later = None;
            match index {
                0 => drop(plain.load(source.as_str()).into_function().unwrap()),
                1 => {
                    let parsed = full_moon::parse_fallible(&source, full_moon::LuaVersion::lua54());
                    assert!(parsed.errors().is_empty());
                }
                2 => drop(lint::lint(&source, &env)),
                3 => later = Some(lint::lint_deferring(&source, &env).1),
                4 => check(&mut without),
                _ => check(&mut with_report),
            }
            wall[index].push(started.elapsed());
            cpu[index].push(cpu_now().saturating_sub(cpu_started));
            drop(later);
            without.release_deferred();
            with_report.release_deferred();
        }
    }
    println!(
        "check on {} lines ({} bytes), {rounds} rounds, {} warnings found",
        source.lines().count(),
        source.len(),
        findings.len()
    );
    println!("| step | wall, median | thread CPU, median |");
    println!("|---|---:|---:|");
    for (index, name) in ROWS.iter().enumerate() {
        println!(
            "| {name} | {:.1} ms | {:.1} ms |",
            median(&mut wall[index]).as_secs_f64() * 1e3,
            median(&mut cpu[index]).as_secs_f64() * 1e3
        );
    }
}
