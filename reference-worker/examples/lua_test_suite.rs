//! Runs Lua's own test suite (the `testes/` folder of the Lua release the
//! metered VM builds, e.g. `git archive v5.4.8 testes` of github.com/lua/lua;
//! not part of this repository) on the metered VM: each file in a state of
//! its own with the meter attached as the sandbox attaches it (DESIGN §15.6),
//! the worker's default limits, and Lua's full libraries, since the suite
//! needs `io`, `os` and `debug`. A file passes when it runs to its end.
//!
//! ```text
//! cargo run --example lua_test_suite -p quirl-lua-reference-worker -- TESTES [FILE…]
//! ```
//!
//! Run from no particular folder: the runner enters TESTES, as the suite
//! expects. With no FILE it runs every file that stock Lua runs without the
//! C test library and that the sandbox mode does not refuse on purpose
//! (`calls`, `errors` and `db` load binary chunks; `gc`, `cstack` and
//! `locals` set `__gc`; DESIGN §15.3). The upgrade runbook of
//! `metered-lua/README.md` runs it.
#![allow(clippy::print_stdout)]

use mlua::Lua;
use quirl_lua_reference_worker::budget::Meter;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

const FILES: &[&str] = &[
    "api",
    "attrib",
    "big",
    "bitwise",
    "closure",
    "code",
    "constructs",
    "coroutine",
    "events",
    "goto",
    "literals",
    "math",
    "nextvar",
    "pm",
    "sort",
    "strings",
    "tpack",
    "utf8",
    "vararg",
];

/// The worker's defaults (`quirl-lua --help`).
const MEMORY: u64 = 32 << 20;
const INSTRUCTIONS: u64 = 100_000_000;

fn run(file: &str) -> Result<u64, String> {
    let source = std::fs::read(format!("{file}.lua")).map_err(|e| format!("{file}.lua: {e}"))?;
    // SAFETY: `unsafe_new` opens `debug`, which can break the state's
    // invariants from Lua code; the code run here is Lua's own test suite,
    // which uses it only as Lua's own interpreter lets it.
    let lua = unsafe { Lua::unsafe_new() };
    let meter = Arc::new(Meter::new(
        MEMORY,
        INSTRUCTIONS,
        Arc::new(AtomicBool::new(false)),
    ));
    meter.attach(&lua);
    let globals = lua.globals();
    for flag in ["_port", "_soft"] {
        globals.set(flag, true).map_err(|e| e.to_string())?;
    }
    meter.begin(INSTRUCTIONS, Duration::from_secs(120));
    let outcome = lua.load(source).set_name(format!("@{file}.lua")).exec();
    let used = meter.used_units();
    meter.end();
    match outcome {
        Ok(()) => Ok(used),
        Err(error) => Err(format!("{error} (meter: {:?})", meter.stopped())),
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(folder) = args.next() else {
        eprintln!("usage: lua_test_suite TESTES [FILE…]");
        return ExitCode::from(2);
    };
    if let Err(error) = std::env::set_current_dir(&folder) {
        eprintln!("{folder}: {error}");
        return ExitCode::from(2);
    }
    let named: Vec<String> = args.collect();
    let files: Vec<&str> = if named.is_empty() {
        FILES.to_vec()
    } else {
        named.iter().map(String::as_str).collect()
    };
    let mut failed = 0;
    for file in files {
        match run(file) {
            Ok(units) => println!("ok    {file}.lua ({units} units)"),
            Err(error) => {
                failed += 1;
                println!("FAIL  {file}.lua: {error}");
            }
        }
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
