//! The parent against the real reference worker (`quirl-lua
//! --internal-lua-worker-v1`): results, guest errors, and workers stuck in
//! native code killed at the deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_testkit::procfs;
use quirl_lua_testkit::serial::one_at_a_time;

use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use quirl_lua_reference_parent::{
    ErrorClass, LimitKind, Policy, PolicySettings, WORKER_ARGUMENT, Worker, WorkerCommand,
    WorkerConfig,
};

const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");
/// Generous only where the bound is the behaviour.
const LATE_MAX: Duration = Duration::from_millis(200);

static SERIAL: Mutex<()> = Mutex::new(());

fn real(wall_ms: u64) -> WorkerConfig {
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms: wall_ms,
    })
    .unwrap();
    WorkerConfig::new(WorkerCommand::new(CLI).arg(WORKER_ARGUMENT), policy)
        .with_startup_timeout(Duration::from_secs(10))
}

#[test]
fn cli_eval_prints_forty_two() {
    let output = Command::new(CLI)
        .args(["eval", "return 6 * 7"])
        .env_remove("QUIRL_LUA_WORKER")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "42\n",
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(0));
}

#[test]
fn globals_persist_across_requests_of_one_worker() {
    let _guard = one_at_a_time(&SERIAL);
    let mut worker = Worker::spawn(real(5_000)).unwrap();
    worker.eval("counter = 41").unwrap();
    assert_eq!(
        worker.eval("counter = counter + 1 return counter").unwrap(),
        serde_json::json!(42)
    );
    worker.shutdown().unwrap();
}

#[test]
fn guest_error_leaves_the_worker_usable() {
    let _guard = one_at_a_time(&SERIAL);
    let mut worker = Worker::spawn(real(5_000)).unwrap();
    let error = worker.eval("error('boom')").unwrap_err();
    assert_eq!(error.class(), ErrorClass::Guest, "{error}");
    assert_eq!(error.code().as_str(), "lua");
    assert_eq!(worker.eval("return 1").unwrap(), serde_json::json!(1));
}

fn assert_killed_at_the_deadline(source: &str, wall_ms: u64) {
    let _guard = one_at_a_time(&SERIAL);
    let mut worker = Worker::spawn(real(wall_ms)).unwrap();
    let pid = i32::try_from(worker.pid()).unwrap();
    let started = Instant::now();
    let error = worker.eval(source).unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(error.code().as_str(), "resource_limit", "{error}");
    assert!(
        elapsed <= Duration::from_millis(wall_ms) + LATE_MAX,
        "returned after {elapsed:?}: {error}"
    );
    // Either the parent's deadline fired (the worker was killed) or the
    // worker's own wall-time hook answered first; both are bounded.
    if error.class() == ErrorClass::Deadline {
        assert!(worker.is_poisoned());
    } else {
        assert_eq!(error.class(), ErrorClass::Guest, "{error}");
    }
    drop(worker);
    assert!(procfs::living_members_after(pid, Duration::from_secs(1)).is_empty());
    assert!(procfs::own_zombies().is_empty());
}

#[test]
fn table_move_over_the_whole_integer_range_is_refused_by_the_instruction_budget() {
    // The reference worker charges table.move's moves as they go (DESIGN
    // §15.6): a budget of 10,000,000 ends it after as many moves, where the
    // parent's deadline of a minute is far away — the worker's own limit,
    // not the parent's kill, ends it, at any machine speed.
    let _guard = one_at_a_time(&SERIAL);
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 10_000_000,
        wall_time_ms: 60_000,
    })
    .unwrap();
    let config = WorkerConfig::new(WorkerCommand::new(CLI).arg(WORKER_ARGUMENT), policy);
    let mut worker = Worker::spawn(config).unwrap();
    let error = worker
        .eval("table.move({}, 1, math.maxinteger - 1, 2)")
        .unwrap_err();
    assert_eq!(error.class(), ErrorClass::Limit, "{error}");
    assert_eq!(error.limit(), Some(LimitKind::Instructions), "{error}");
}

#[test]
fn worker_stuck_in_table_move_is_killed_at_the_deadline() {
    // One C call (90 million element moves, seconds of native work, within
    // the instruction budget) that never returns to a Lua hook: only the
    // parent's deadline can stop it.
    let _guard = one_at_a_time(&SERIAL);
    let mut worker = Worker::spawn(real(200)).unwrap();
    let pid = i32::try_from(worker.pid()).unwrap();
    let started = Instant::now();
    let error = worker.eval("table.move({}, 1, 90000000, 2)").unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(error.class(), ErrorClass::Deadline, "{error}");
    assert!(
        elapsed <= Duration::from_millis(200) + LATE_MAX,
        "returned after {elapsed:?}"
    );
    assert!(worker.is_poisoned());
    assert!(procfs::living_members_after(pid, Duration::from_secs(1)).is_empty());
    assert!(procfs::own_zombies().is_empty());
    // The next call runs on a fresh worker (DESIGN §17.4).
    assert_eq!(worker.eval("return 1").unwrap(), serde_json::json!(1));
    assert_ne!(i32::try_from(worker.pid()).unwrap(), pid);
}

#[test]
fn worker_looping_over_large_native_string_calls_is_stopped_in_time() {
    assert_killed_at_the_deadline(
        "local s = ('x'):rep(1000000) for i = 1, 1e9 do s = s:upper():lower() end",
        300,
    );
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(CLI)
        .args(args)
        .env_remove("QUIRL_LUA_WORKER")
        .output()
        .unwrap()
}

fn write_temp(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("quirl-lua-real-worker-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn cli_plugin_lists_registrations_and_renders_a_prompt() {
    let plugin = write_temp(
        "plugin.lua",
        r#"quirl.prompt.add_segment({ name = "hello", render = function(ctx) return "hi there" end })"#,
    );
    let plugin = plugin.to_str().unwrap();
    let listed = cli(&["plugin", plugin]);
    assert_eq!(
        listed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let registrations: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(registrations["prompt_segments"][0]["name"], "hello");
    let rendered = cli(&["plugin", plugin, "--prompt", "hello"]);
    assert_eq!(String::from_utf8_lossy(&rendered.stdout), "\"hi there\"\n");
}

#[test]
fn cli_run_passes_arguments_and_exits_with_the_scripts_status() {
    let module = |status: u8| {
        format!(
            "return {{ abi_version = 1, main = function(ctx) return {{ abi_version = 1, ok = true, status = {status}, output = {{ kind = 'value', value = {{ type = 'string', value = table.concat(ctx.args, ',') }} }} }} end }}"
        )
    };
    let ok = write_temp("ok.lua", &module(0));
    let output = cli(&["run", ok.to_str().unwrap(), "a", "b"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let outcome: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(outcome["output"]["value"]["value"], "a,b");
    // DESIGN §17.5: the script's own status is the exit status.
    let failing = write_temp("fail.lua", &module(2));
    assert_eq!(
        cli(&["run", failing.to_str().unwrap()]).status.code(),
        Some(2)
    );
}

#[test]
fn cli_test_prints_the_number_of_tests() {
    let tests = write_temp(
        "tests.lua",
        "return { test_one = function() assert(1 == 1) end, test_two = function() end }",
    );
    let output = cli(&["test", tests.to_str().unwrap()]);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "2\n",
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn cli_limits_exit_three() {
    assert_eq!(
        cli(&["--instructions", "100000", "eval", "while true do end"])
            .status
            .code(),
        Some(3)
    );
    assert_eq!(
        cli(&["--memory", "1MiB", "eval", "return ('x'):rep(1e7)"])
            .status
            .code(),
        Some(3)
    );
}

#[test]
fn cli_runs_a_granted_process_through_the_parent() {
    let granted = cli(&[
        "--allow-process",
        "--grant",
        "process.spawn:echo",
        "eval",
        "return quirl.process.run('echo hi').value",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&granted.stdout),
        "\"hi\\n\"\n",
        "{}",
        String::from_utf8_lossy(&granted.stderr)
    );
    let denied = cli(&[
        "--allow-process",
        "eval",
        "return quirl.process.run('echo hi').value",
    ]);
    assert_eq!(denied.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&denied.stderr).contains("capability denied"));
}

#[test]
fn cli_prompt_segments_that_never_return_end_within_their_deadline() {
    // DESIGN §15.6/§17.6: a segment declaring 8 ms under a 5 s wall time ends
    // by its own deadline — the worker's clock inside Lua, the parent's kill
    // at the deadline plus the slack otherwise — never at the wall time.
    for (name, render) in [
        ("lua_loop", "while true do end"),
        ("native", "table.move({}, 1, 1e12, 2) return 'x'"),
        (
            "close_handler",
            "local x <close> = setmetatable({}, {__close = function() while true do end end}) while true do end",
        ),
        ("rep", "for i = 1, 1e12 do string.rep('', 1e15) end"),
    ] {
        let plugin = write_temp(
            &format!("{name}.lua"),
            &format!(
                "quirl.prompt.add_segment({{ name = 'spin', deadline_ms = 8, render = function(ctx) {render} end }})"
            ),
        );
        let started = Instant::now();
        let output = Command::new(CLI)
            .args([
                "--wall-time-ms",
                "5000",
                "plugin",
                plugin.to_str().unwrap(),
                "--prompt",
                "spin",
            ])
            .env_remove("QUIRL_LUA_WORKER")
            .output()
            .unwrap();
        let elapsed = started.elapsed();
        let text = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(3), "{name}: {text}");
        assert!(text.contains("resource_limit"), "{name}: {text}");
        assert!(
            elapsed < Duration::from_secs(1),
            "{name}: {elapsed:?} {text}"
        );
    }
}

#[test]
fn cli_eval_prints_no_heap_address() {
    let output = Command::new(CLI)
        .args(["eval", "return tostring(pcall) .. tostring({})"])
        .env_remove("QUIRL_LUA_WORKER")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(!text.contains("0x"), "{text}");
    assert!(
        text.contains("function: #") && text.contains("table: #"),
        "{text}"
    );
}
