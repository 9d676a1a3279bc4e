//! What the capabilities `lua.os` and `lua.io` and the collector's
//! switches cost per budget unit (BENCHMARKS.md, "The lua.os and lua.io
//! capabilities" and "The collector's switches"; DESIGN §15.6-b).
//!
//! 1. Each guest-reachable function of `lua.os` and `lua.io` in a loop
//!    until the budget ends it: thread CPU per unit charged, next to a
//!    plain loop.
//! 2. The collector under each configuration a guest can ask for, on a
//!    heap of live tables with allocation churn: the time of a fixed
//!    number of churn iterations in stock Lua 5.4.9 (unclamped: the stock
//!    VM stores whatever it is given) and in the sandbox (clamped), both
//!    read by the program itself with `os.clock`, side by side in one run;
//!    and the sandbox's CPU per unit.
//!
//! ```sh
//! cargo bench -p quirl-lua-reference-worker --bench capabilities
//! ```
//!
//! Without `--bench` (`cargo test --all-targets`) it runs one small case of
//! each part.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::records::{
    ExecutionContext, ExecutionEffects, ExecutionInput, Operation, OutputTarget, Policy,
    PolicySettings,
};
use quirl_lua_reference_worker::{Verdict, Vm, VmConfig};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

fn thread_cpu_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    u64::try_from(ts.tv_sec).unwrap() * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap()
}

fn vm(instructions: u64) -> Vm {
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 64 << 20,
        instruction_limit: instructions,
        wall_time_ms: 60_000,
    })
    .unwrap();
    Vm::new(
        &VmConfig {
            policy,
            grants: Some(vec!["lua.io".to_owned(), "lua.os".to_owned()]),
            process_enabled: false,
        },
        Arc::new(AtomicBool::new(false)),
        None,
    )
    .unwrap()
}

fn context(capture: bool) -> ExecutionContext {
    ExecutionContext {
        arguments: Vec::new(),
        environment: [("X".to_owned(), "1".to_owned())].into(),
        working_directory: "/".to_owned(),
        input: ExecutionInput::Bytes(b"12 34\nabc\n".repeat(1000)),
        output: if capture {
            OutputTarget::Capture {
                max_bytes_per_stream: 1 << 20,
            }
        } else {
            OutputTarget::Value
        },
        declared_effects: ExecutionEffects::default(),
    }
}

const IDIOMS: &[(&str, &str)] = &[
    ("plain loop", "while true do end"),
    ("os.clock()", "while true do os.clock() end"),
    ("os.time()", "while true do os.time() end"),
    (
        "os.time(t)",
        "local t = {year = 2024, month = 7, day = 1, hour = 12} while true do os.time(t) end",
    ),
    ("os.date('*t')", "while true do os.date('*t', 1e9) end"),
    ("os.date('%c')", "while true do os.date('%c', 1e9) end"),
    (
        "os.date('%d' x100)",
        "local f = string.rep('%d', 100) while true do os.date(f, 1e9) end",
    ),
    (
        "os.date('%Ec' x100)",
        "local f = string.rep('%Ec', 100) while true do os.date(f, 1e9) end",
    ),
    ("os.getenv", "while true do os.getenv('X') end"),
    ("print('x')", "while true do print('x') end"),
    ("print(1, 2.5, 'x')", "while true do print(1, 2.5, 'x') end"),
    ("io.write('x')", "while true do io.write('x') end"),
    ("io.write(1.5, 2)", "while true do io.write(1.5, 2) end"),
    ("io.read('l')", "while true do io.read('l') end"),
    ("io.read('n')", "while true do io.read('n') end"),
    ("io.open", "while true do io.open('x') end"),
    ("io.lines()", "while true do io.lines() end"),
];

fn idioms(full: bool) {
    let budget = if full { 5_000_000 } else { 10_000 };
    println!("| idiom | output | ns of thread CPU per unit |");
    println!("|---|---|---:|");
    for (name, source) in if full { IDIOMS } else { &IDIOMS[..2] } {
        for capture in [false, true] {
            let mut vm = vm(budget);
            let started = thread_cpu_ns();
            let verdict = vm.handle(Operation::Run {
                source: (*source).to_owned(),
                source_name: "bench.lua".to_owned(),
                context: context(capture),
            });
            let cpu = thread_cpu_ns() - started;
            assert!(
                matches!(verdict, Verdict::Retired(_)),
                "{name}: {verdict:?}"
            );
            let units = vm.meter().used_units().max(1);
            println!(
                "| `{name}` | {} | {:.1} |",
                if capture { "captured" } else { "dropped" },
                cpu as f64 / units as f64
            );
        }
    }
}

/// The collector configurations of `tests/collector.rs`.
const CONFIGURATIONS: &[&str] = &[
    "",
    "collectgarbage('incremental', 0, 0, 0)",
    "collectgarbage('incremental', -1, 1000, 1)",
    "collectgarbage('incremental', 1024, 1, 40)",
    "collectgarbage('setpause', 0) collectgarbage('setstepmul', 1023)",
    "collectgarbage('generational', 1, 1)",
    "collectgarbage('generational', 256, 1000)",
    "collectgarbage('generational', 20, 100)",
];

fn churn_program(configure: &str, tables: u32, iterations: u32) -> String {
    format!(
        "keep = {{}} for i = 1, {tables} do keep[i] = {{i}} end {configure}
         local t = {{}}
         local started = os.clock()
         for n = 1, {iterations} do t[n % 64 + 1] = {{n}} end
         return string.format('%.1f', (os.clock() - started) * 1e9 / {iterations})"
    )
}

/// A loop of mode switches (each walks the heap), timed like the churn.
fn switches_program(tables: u32, iterations: u32) -> String {
    format!(
        "keep = {{}} for i = 1, {tables} do keep[i] = {{i}} end
         local started = os.clock()
         for n = 1, {iterations} do collectgarbage('generational') collectgarbage('incremental') end
         return string.format('%.1f', (os.clock() - started) * 1e9 / {iterations})"
    )
}

fn collector(full: bool) {
    let (tables, iterations) = if full {
        (100_000, 20_000)
    } else {
        (1_000, 100)
    };
    println!();
    println!(
        "| configuration | stock Lua 5.4.9, ns per iteration | sandbox, ns per iteration | sandbox, ns of thread CPU per unit |"
    );
    println!("|---|---:|---:|---:|");
    let configurations = if full {
        CONFIGURATIONS
    } else {
        &CONFIGURATIONS[..2]
    };
    let programs = configurations
        .iter()
        .map(|configure| {
            let name = if configure.is_empty() {
                "(default)"
            } else {
                configure
            };
            (name, churn_program(configure, tables, iterations))
        })
        .chain(std::iter::once((
            "mode switches, a pair per iteration",
            switches_program(tables, iterations / 100),
        )));
    for (name, program) in programs {
        let stock = quirl_lua_testkit::stock::run(&program, "=bench").unwrap();
        let mut vm = vm(100_000_000);
        let started = thread_cpu_ns();
        let verdict = vm.handle(Operation::Eval {
            source: program.clone(),
        });
        let cpu = thread_cpu_ns() - started;
        let Verdict::Success(ours) = verdict else {
            panic!("{name}: {verdict:?}")
        };
        let units = vm.meter().used_units().max(1);
        println!(
            "| `{name}` | {stock} | {} | {:.1} |",
            ours.as_str().unwrap_or_default(),
            cpu as f64 / units as f64
        );
    }
}

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    idioms(full);
    collector(full);
}
