//! Interop with Quirl 0.1 (SPEC.md §14, §19): our parent driving Quirl's
//! worker (`$QUIRL_BIN --internal-lua-worker-v1`) through every operation
//! of §7.1, each success-path result compared byte for byte (canonical
//! JSON, §12.1) with what our own worker answers to the same requests.
//!
//! Runs only when `QUIRL_BIN` names a Quirl 0.1 binary (built from Quirl's
//! public source; CI does not build it); otherwise every test prints why it
//! is skipped and returns.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use quirl_lua_protocol::decode_parent_frame;
use quirl_lua_protocol::records::{Operation, OperationResult, ParentFrame, PolicySettings};
use quirl_lua_reference_parent::{Policy, WORKER_ARGUMENT, Worker, WorkerCommand, WorkerConfig};
use serde_json::{Value, json};

const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");

fn quirl_bin(test: &str) -> Option<PathBuf> {
    match std::env::var_os("QUIRL_BIN") {
        Some(path) if !path.is_empty() => {
            let path = PathBuf::from(path);
            assert!(path.is_file(), "QUIRL_BIN={} is not a file", path.display());
            Some(path)
        }
        _ => {
            eprintln!(
                "skipped {test}: QUIRL_BIN is not set (point it at a Quirl 0.1 `quirl` binary to run the interop tests; CI does not build Quirl)"
            );
            None
        }
    }
}

fn spawn(program: PathBuf) -> Worker {
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms: 5_000,
    })
    .unwrap();
    let config = WorkerConfig::new(WorkerCommand::new(program).arg(WORKER_ARGUMENT), policy)
        .with_startup_timeout(Duration::from_secs(20));
    Worker::spawn(config).unwrap()
}

const PLUGIN: &str = "quirl.prompt.add_segment{ name = 'conf', render = function(ctx) return 'seg:' .. tostring(ctx.n) end }\n\
quirl.completion.add_provider{ command = 'conf', complete = function(ctx) return { 'alpha', { value = 'beta', detail = 'second' } } end }\n\
quirl.extension.contribute{ kind = 'catalog', name = 'conf.catalog', deadline_ms = 100, provide = function(ctx) return { items = { 'x' } } end }\n\
quirl.events.subscribe{ name = 'conf.events', events = { 'session_start' }, capabilities = { 'events_observe' }, deadline_ms = 100, observe = function(event) return { { action = 'diagnose', message = 'seen' } } end }\n\
quirl.plugin.command{ name = 'conf-cmd', signature = 'conf-cmd', summary = 'Conformance command', details = 'Returns a value.', input_type = 'Nothing', output_type = 'Int', examples = { 'conf-cmd' }, effects = { 'none' }, error_codes = { invalid_argument = 'never' }, run = function(args) return { abi_version = 1, ok = true, status = 0, output = { kind = 'value', value = { type = 'int', value = 7 } } } end }";

fn context() -> Value {
    json!({
        "arguments": ["a", "b"],
        "environment": {"HOME": "/home/interop"},
        "working_directory": "/",
        "input": {"kind": "none"},
        "output": {"kind": "value"},
        "declared_effects": {"read_filesystem": false, "write_filesystem": false,
                             "spawn_process": false, "change_directory": false}
    })
}

/// One request per operation of §7.1 after `initialize` (which `spawn`
/// sends), in an order where every callback exists when it is called.
fn operations() -> Vec<(&'static str, Value)> {
    vec![
        (
            "eval",
            json!({"operation": "eval",
            "source": "return { n = 6 * 7, s = 'häh\\n', list = { 1, 2.5, true }, nested = { a = { b = 'c' } } }"}),
        ),
        (
            "check",
            json!({"operation": "check", "source": "local x = 1 return x", "source_name": "c.lua"}),
        ),
        (
            "load_config",
            json!({"operation": "load_config",
            "source": "return { editor = { keymap = 'vim' } }", "source_name": "config.lua"}),
        ),
        (
            "load_plugin",
            json!({"operation": "load_plugin", "source": PLUGIN, "source_name": "interop_plugin.lua"}),
        ),
        (
            "render_prompt",
            json!({"operation": "render_prompt", "name": "conf", "context": {"n": 5}}),
        ),
        (
            "complete",
            json!({"operation": "complete", "command": "conf", "context": {}}),
        ),
        (
            "contribution",
            json!({"operation": "contribution", "kind": "catalog", "name": "conf.catalog", "context": {}}),
        ),
        (
            "run",
            json!({"operation": "run",
            "source": "return { abi_version = 1, main = function(ctx) return { abi_version = 1, ok = true, status = 0, output = { kind = 'value', value = { type = 'string', value = table.concat(ctx.args, ',') } } } end }",
            "source_name": "r.lua", "context": context()}),
        ),
        (
            "plugin_command",
            json!({"operation": "plugin_command", "name": "conf-cmd", "context": context(), "deadline_ms": 1000}),
        ),
        (
            "event",
            json!({"operation": "event",
            "event": {"protocol_version": 2, "sequence": 1, "data": {"kind": "session_start", "restored": false}}}),
        ),
        (
            "test",
            json!({"operation": "test",
            "source": "return { test_a = function() end, test_b = function() end, helper = function() end }",
            "source_name": "t.lua"}),
        ),
    ]
}

/// The canonical JSON of each operation's result (or the error code).
fn results(program: PathBuf) -> Vec<(&'static str, Result<String, String>)> {
    let mut worker = spawn(program);
    let out = operations()
        .into_iter()
        .map(|(name, operation)| {
            let frame = json!({"kind": "request", "request": {"version": 1, "id": 1, "operation": operation}});
            let ParentFrame::Request { request } =
                decode_parent_frame(frame.to_string().as_bytes())
                    .unwrap_or_else(|error| panic!("{name}: {error}"))
            else {
                panic!("{name}: not a request");
            };
            let operation: Operation = request.operation;
            let result = worker
                .call(operation, None)
                .map(|result: OperationResult| serde_json::to_string(&result.to_value().unwrap()).unwrap())
                .map_err(|error| format!("{}: {error}", error.code()));
            (name, result)
        })
        .collect();
    worker.shutdown().unwrap();
    out
}

#[test]
fn our_parent_drives_quirls_worker_through_every_operation_like_our_own() {
    let Some(quirl) =
        quirl_bin("our_parent_drives_quirls_worker_through_every_operation_like_our_own")
    else {
        return;
    };
    let ours = results(PathBuf::from(CLI));
    let theirs = results(quirl);
    assert_eq!(ours.len(), 11, "every operation of §7.1 besides initialize");
    for ((name, ours), (_, theirs)) in ours.iter().zip(&theirs) {
        let ours = ours
            .as_ref()
            .unwrap_or_else(|error| panic!("{name}: our worker failed: {error}"));
        let theirs = theirs
            .as_ref()
            .unwrap_or_else(|error| panic!("{name}: Quirl's worker failed: {error}"));
        assert_eq!(ours, theirs, "{name}: the results differ");
    }
}

#[test]
fn the_cli_runs_quirls_worker_with_the_same_output() {
    let Some(quirl) = quirl_bin("the_cli_runs_quirls_worker_with_the_same_output") else {
        return;
    };
    let worker = format!("{} {WORKER_ARGUMENT}", quirl.display());
    let plugin_file =
        std::env::temp_dir().join(format!("quirl-interop-plugin-{}.lua", std::process::id()));
    std::fs::write(&plugin_file, PLUGIN).unwrap();
    let run = |worker: Option<&str>, plugin: bool, lines: &[Value]| {
        let mut command = Command::new(CLI);
        if let Some(worker) = worker {
            command.args(["--worker", worker]);
        }
        command.arg("batch");
        if plugin {
            command.arg("--plugin").arg(&plugin_file);
        }
        let mut child = command
            .env_remove("QUIRL_LUA_WORKER")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let input: String = lines.iter().map(|line| format!("{line}\n")).collect();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let plain = [
        json!({"op": "eval", "source": "return { answer = 6 * 7, list = { 'a', 'b' } }"}),
        json!({"op": "check", "source": "return 1"}),
        json!({"op": "test", "source": "return { test_one = function() end }"}),
        json!({"op": "run", "source": "return { abi_version = 1, main = function(ctx) return { abi_version = 1, ok = true, status = 0, output = { kind = 'value', value = { type = 'string', value = 'hi' } } } end }"}),
        json!({"op": "load_plugin", "source": PLUGIN}),
    ];
    // The plugin's callbacks: render_prompt, complete, plugin_command, event.
    let callbacks = [
        json!({"op": "prompt", "name": "conf", "context": {"n": 3}}),
        json!({"op": "complete", "command": "conf"}),
        json!({"op": "command", "name": "conf-cmd"}),
        json!({"op": "event", "event": {"protocol_version": 2, "sequence": 1,
            "data": {"kind": "session_start", "restored": false}}}),
    ];
    for (plugin, lines) in [(false, &plain[..]), (true, &callbacks[..])] {
        let ours = run(None, plugin, lines);
        let theirs = run(Some(&worker), plugin, lines);
        let ours_text = String::from_utf8_lossy(&ours.stdout);
        assert!(ours.status.success(), "{ours_text}");
        assert_eq!(ours_text.lines().count(), lines.len(), "{ours_text}");
        assert!(!ours_text.contains("\"ok\":false"), "{ours_text}");
        assert_eq!(
            String::from_utf8_lossy(&theirs.stdout),
            ours_text,
            "quirl-lua --worker '{worker}' batch (plugin: {plugin}) printed something else than with our worker"
        );
        assert_eq!(theirs.status.code(), Some(0));
    }
    std::fs::remove_file(&plugin_file).unwrap();
}
