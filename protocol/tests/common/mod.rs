//! Valid sample frames and results shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::records::*;
use quirl_lua_protocol::*;
use serde_json::{Value, json};

pub const DESCRIPTOR: &str = LUA_WORKER_PROTOCOL_DESCRIPTOR;

pub fn error_record() -> Value {
    json!({
        "code": "lua", "message": "boom",
        "labels": [{"source": "return x", "start": 7, "end": 8, "message": "here"}],
        "context": ["c"], "help": ["h"], "command": null, "exit_status": null
    })
}

pub fn policy() -> Value {
    json!({"allow_process": true, "memory_limit_bytes": 1024, "instruction_limit": 1000, "wall_time_ms": 100})
}

pub fn context() -> Value {
    json!({
        "arguments": ["a"], "environment": {"HOME": "/root"}, "working_directory": "/tmp",
        "input": {"kind": "value", "content": {"type": "u_int", "value": 1}},
        "output": {"kind": "capture", "max_bytes_per_stream": 10},
        "declared_effects": {"read_filesystem": false, "write_filesystem": false, "spawn_process": true, "change_directory": false}
    })
}

pub fn request(operation: Value) -> Value {
    json!({"kind": "request", "request": {"version": 1, "id": 1, "operation": operation}})
}

pub fn event(data: Value) -> Value {
    request(
        json!({"operation": "event", "event": {"protocol_version": 2, "sequence": 1, "data": data}}),
    )
}

pub fn run_with_input(input: Value) -> Value {
    let mut context = context();
    context["input"] = input;
    request(json!({"operation": "run", "source": "x", "source_name": "r.lua", "context": context}))
}

pub fn value_input(value: Value) -> Value {
    run_with_input(json!({"kind": "value", "content": value}))
}

pub fn host_call() -> Value {
    json!({"kind": "host_call", "call": {"request_id": 1, "call_id": 1, "command": "git status", "deadline_ms": 100, "max_output_bytes": 1024}})
}

pub fn host_response_outcome() -> Value {
    json!({"kind": "host_response", "response": {"request_id": 1, "call_id": 1, "outcome": {"status": 0, "stdout": "x", "stderr": null}}})
}

pub fn host_response_error() -> Value {
    json!({"kind": "host_response", "response": {"request_id": 1, "call_id": 1, "error": error_record()}})
}

pub fn response_ok(result: Value) -> Value {
    json!({"kind": "response", "response": {"version": 1, "id": 1, "ok": true, "result": result}})
}

pub fn response_err() -> Value {
    json!({"kind": "response", "response": {"version": 1, "id": 1, "ok": false, "result": null, "error": error_record()}})
}

/// Every parent→worker frame shape: one per operation and nested variant.
pub fn parent_frames() -> Vec<(&'static str, Value)> {
    vec![
        (
            "initialize",
            request(
                json!({"operation": "initialize", "protocol_descriptor": DESCRIPTOR, "policy": policy(), "grants": null, "process_enabled": true}),
            ),
        ),
        (
            "initialize with grants",
            request(
                json!({"operation": "initialize", "protocol_descriptor": DESCRIPTOR, "policy": policy(), "grants": ["process.spawn:git"], "process_enabled": false}),
            ),
        ),
        (
            "eval",
            request(json!({"operation": "eval", "source": "return 42"})),
        ),
        (
            "check",
            request(json!({"operation": "check", "source": "x", "source_name": "c.lua"})),
        ),
        (
            "load_config",
            request(json!({"operation": "load_config", "source": "x", "source_name": "c.lua"})),
        ),
        (
            "load_plugin",
            request(json!({"operation": "load_plugin", "source": "x", "source_name": "p.lua"})),
        ),
        (
            "render_prompt",
            request(
                json!({"operation": "render_prompt", "name": "git", "context": {"b": [1, -2, 1.5], "a": null}}),
            ),
        ),
        (
            "complete",
            request(json!({"operation": "complete", "command": "git", "context": {}})),
        ),
        (
            "contribution",
            request(
                json!({"operation": "contribution", "kind": "panel", "name": "p", "context": "x"}),
            ),
        ),
        (
            "run",
            request(
                json!({"operation": "run", "source": "x", "source_name": "r.lua", "context": context()}),
            ),
        ),
        (
            "plugin_command",
            request(
                json!({"operation": "plugin_command", "name": "cmd", "context": context(), "deadline_ms": 5}),
            ),
        ),
        (
            "test",
            request(json!({"operation": "test", "source": "x", "source_name": "t.lua"})),
        ),
        ("input none", run_with_input(json!({"kind": "none"}))),
        (
            "input bytes",
            run_with_input(json!({"kind": "bytes", "content": [0, 255]})),
        ),
        ("output inherit", {
            let mut c = context();
            c["output"] = json!({"kind": "inherit"});
            request(json!({"operation": "run", "source": "x", "source_name": "r", "context": c}))
        }),
        ("output value", {
            let mut c = context();
            c["output"] = json!({"kind": "value"});
            request(json!({"operation": "run", "source": "x", "source_name": "r", "context": c}))
        }),
        ("value nothing", value_input(json!({"type": "nothing"}))),
        (
            "value bool",
            value_input(json!({"type": "bool", "value": true})),
        ),
        (
            "value int",
            value_input(json!({"type": "int", "value": -5})),
        ),
        (
            "value u_int",
            value_input(json!({"type": "u_int", "value": 18446744073709551615u64})),
        ),
        (
            "value decimal",
            value_input(json!({"type": "decimal", "value": "1.50"})),
        ),
        (
            "value string",
            value_input(json!({"type": "string", "value": "s"})),
        ),
        (
            "value list",
            value_input(json!({"type": "list", "value": [{"type": "nothing"}]})),
        ),
        (
            "value record",
            value_input(
                json!({"type": "record", "value": {"k": {"type": "bool", "value": false}}}),
            ),
        ),
        (
            "value path",
            value_input(json!({"type": "path", "value": "/etc"})),
        ),
        (
            "value duration",
            value_input(json!({"type": "duration", "value": {"nanoseconds": 5}})),
        ),
        (
            "value size",
            value_input(json!({"type": "size", "value": {"bytes": 5}})),
        ),
        (
            "value date_time",
            value_input(json!({"type": "date_time", "value": "2024-01-01"})),
        ),
        (
            "value pattern",
            value_input(json!({"type": "pattern", "value": "*.rs"})),
        ),
        (
            "event session_start",
            event(json!({"kind": "session_start", "restored": false})),
        ),
        (
            "event session_restore",
            event(json!({"kind": "session_restore", "session_id": "s"})),
        ),
        (
            "event directory_changed",
            event(json!({"kind": "directory_changed", "previous": "/a", "current": "/b"})),
        ),
        (
            "event command_plan",
            event(json!({"kind": "command_plan", "source": "ls", "effects": ["read_filesystem"]})),
        ),
        (
            "event execution_progress",
            event(
                json!({"kind": "execution_progress", "completed": 1, "total": null, "message": "m"}),
            ),
        ),
        (
            "event output",
            event(json!({"kind": "output", "stream": "stdout", "bytes": 3})),
        ),
        (
            "event output text",
            event(json!({"kind": "output", "stream": "stderr", "bytes": 3, "text": "abc"})),
        ),
        (
            "event cancellation",
            event(json!({"kind": "cancellation", "reason": "r"})),
        ),
        (
            "event result",
            event(json!({"kind": "result", "status": -1, "duration_ms": 3})),
        ),
        (
            "event error",
            event(json!({"kind": "error", "error": error_record()})),
        ),
        ("host_response outcome", host_response_outcome()),
        ("host_response error", host_response_error()),
    ]
}

/// Every worker→parent frame shape.
pub fn worker_frames() -> Vec<(&'static str, Value)> {
    vec![
        ("response ok", response_ok(json!(42))),
        (
            "response ok object",
            response_ok(json!({"b": 1, "a": [true, null, "x", 1.25]})),
        ),
        ("response error", response_err()),
        ("host_call", host_call()),
    ]
}

pub fn outcome(output: Value) -> Value {
    json!({"cleanup": "complete", "diagnostics": [error_record()], "output": output, "status": {"code": 0, "kind": "exited"}})
}

pub fn registrations() -> Value {
    json!({
        "commands": [{
            "details": "d", "effects": ["read_filesystem"], "error_codes": {"io": "failed"},
            "examples": ["x"], "input_type": "Nothing", "name": "hello", "output_type": "Values<String>",
            "signature": "hello", "summary": "s"
        }],
        "completion_providers": [{"command": "git"}],
        "contributions": [{"deadline_ms": 20, "kind": "panel", "name": "p", "plain_fallback": "fallback"}],
        "events": [{"capabilities": ["events_observe"], "deadline_ms": 10, "events": ["output"], "name": "h"}],
        "prompt_segments": [{"deadline_ms": 8, "name": "git"}]
    })
}

pub fn config() -> Value {
    let colors: serde_json::Map<String, Value> = [
        "accent_command",
        "accent_data",
        "context_primary",
        "context_secondary",
        "muted",
        "border",
        "status_background",
        "error",
        "warning",
        "hint",
        "string",
        "operator",
        "expansion",
        "number",
    ]
    .iter()
    .map(|role| (role.to_string(), json!("#112233")))
    .collect();
    json!({
        "completion": {"auto": true, "min_chars": 1},
        "editor": {"banner": "compact", "keymap": "emacs", "semantic_hints": true},
        "picker": {"layout": "adaptive", "preview": true},
        "prompt": {"left": ["directory"], "right": ["status"], "symbols": "auto", "transient": true},
        "schema_version": 4,
        "ui": {"statusline": {"hints": true}, "surface": "auto", "theme": "mine", "themes": {"mine": colors}}
    })
}

pub fn reports() -> Value {
    json!([{
        "actions": [
            {"action": "diagnose", "message": "m"},
            {"action": "rewrite_plan", "source": "ls"},
            {"action": "set_environment", "name": "A", "value": "b"},
            {"action": "block_execution", "reason": "r"},
            {"action": "annotate_result", "key": "k", "value": {"z": 1, "a": [2]}}
        ],
        "error": null,
        "handler": "h"
    }])
}

/// Every typed result shape: (name, operation, result value).
pub fn results() -> Vec<(&'static str, OperationKind, Value)> {
    vec![
        ("initialize", OperationKind::Initialize, Value::Null),
        ("check", OperationKind::Check, Value::Null),
        ("eval", OperationKind::Eval, json!({"x": [1, 2]})),
        ("complete", OperationKind::Complete, json!(["a", "b"])),
        (
            "contribution",
            OperationKind::Contribution,
            json!({"rows": []}),
        ),
        ("load_config", OperationKind::LoadConfig, config()),
        ("load_plugin", OperationKind::LoadPlugin, registrations()),
        (
            "render_prompt text",
            OperationKind::RenderPrompt,
            json!("main"),
        ),
        (
            "render_prompt null",
            OperationKind::RenderPrompt,
            Value::Null,
        ),
        (
            "run inherited",
            OperationKind::Run,
            outcome(json!({"kind": "inherited"})),
        ),
        (
            "run bytes",
            OperationKind::Run,
            outcome(json!({"kind": "bytes", "stderr": [], "stdout": [104, 105]})),
        ),
        (
            "run value",
            OperationKind::Run,
            outcome(
                json!({"kind": "value", "value": {"type": "record", "value": {"a": {"type": "int", "value": 1}}}}),
            ),
        ),
        (
            "plugin_command values",
            OperationKind::PluginCommand,
            outcome(json!({"kind": "values", "values": [{"type": "string", "value": "x"}]})),
        ),
        ("event", OperationKind::Event, reports()),
        ("test", OperationKind::Test, json!(3)),
    ]
}

pub fn bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}
