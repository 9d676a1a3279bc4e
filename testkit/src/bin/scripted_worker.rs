//! `quirl-lua-scripted-worker`: a test double for the lifecycle tests.
//!
//! Not a Lua worker. It answers `initialize`, then acts on a few source
//! shapes chosen so that the same sources are also meaningful Lua for the
//! real worker:
//!
//! - `eval`: a source containing `while true do end` spins on the CPU
//!   forever; `spin(MS)` spins for MS milliseconds and returns MS;
//!   `crash()` aborts; `violate()` answers with a frame that is not JSON;
//!   `hang()` sleeps forever; `retire()` answers with a
//!   `resource_limit` error naming `limit: instructions` and exits 0 (as
//!   the reference worker does after a tripped budget); `trip()` answers
//!   with the same error and keeps serving (as a worker that resets its
//!   budget may, SPEC §13.1-a); `return N` (a JSON
//!   number) returns N; anything else returns `null`.
//! - `load_plugin`: a source containing `syntax error` is refused with a
//!   guest `lua` error; a source starting with `while true do end` spins
//!   forever; otherwise it registers one prompt segment `version` and
//!   remembers the source and the string after `version = "`.
//! - `render_prompt`: spins forever if the plugin's source contains
//!   `while true do end`, otherwise returns the remembered version string.
//!
//! Every other operation is answered with `null`. Deterministic: no
//! randomness and no clocks besides the spins it is asked for.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn main() {
    let mut plugin = String::new();
    while let Some(frame) = read_frame() {
        let request = &frame["request"];
        let id = request["id"].as_u64().unwrap_or(0);
        let operation = &request["operation"];
        let source = operation["source"].as_str().unwrap_or("");
        match operation["operation"].as_str().unwrap_or("") {
            "eval" => eval(id, source),
            "load_plugin" => {
                if source.contains("syntax error") {
                    guest_error(
                        id,
                        "lua",
                        "[string \"plugin\"]:1: syntax error near 'error'",
                    );
                } else {
                    if source.trim_start().starts_with("while true do end") {
                        spin_forever();
                    }
                    plugin = source.to_owned();
                    answer(
                        id,
                        &json!({
                            "prompt_segments": [{"name": "version", "deadline_ms": 100}],
                            "completion_providers": [],
                            "commands": [],
                            "events": [],
                            "contributions": []
                        }),
                    );
                }
            }
            "render_prompt" => {
                if plugin.contains("while true do end") {
                    spin_forever();
                }
                let version = between(&plugin, "version = \"", "\"");
                answer(id, &Value::String(version.to_owned()));
            }
            _ => answer(id, &Value::Null),
        }
    }
}

fn eval(id: u64, source: &str) {
    if source.contains("while true do end") {
        spin_forever();
    } else if source.contains("crash()") {
        std::process::abort();
    } else if source.contains("retire()") {
        limit_error(id);
        std::process::exit(0);
    } else if source.contains("trip()") {
        limit_error(id);
    } else if source.contains("violate()") {
        // Not JSON: a `malformed_json` violation (SPEC §13.2).
        write_payload(b"{not json");
        spin_forever();
    } else if source.contains("hang()") {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    } else if let Ok(ms) = between(source, "spin(", ")").parse::<u64>() {
        let until = Instant::now() + Duration::from_millis(ms);
        let mut x = 0_u64;
        while Instant::now() < until {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        answer(id, &json!(ms));
    } else if let Some(value) = source
        .trim()
        .strip_prefix("return ")
        .and_then(|n| serde_json::from_str::<Value>(n.trim()).ok())
    {
        answer(id, &value);
    } else {
        answer(id, &Value::Null);
    }
}

fn spin_forever() -> ! {
    let mut x = 0_u64;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    text.find(start)
        .map(|at| &text[at + start.len()..])
        .and_then(|rest| rest.find(end).map(|stop| &rest[..stop]))
        .unwrap_or("")
}

fn read_frame() -> Option<Value> {
    let mut stdin = std::io::stdin().lock();
    let mut header = [0_u8; 4];
    stdin.read_exact(&mut header).ok()?;
    let mut payload = vec![0_u8; usize::try_from(u32::from_be_bytes(header)).ok()?];
    stdin.read_exact(&mut payload).ok()?;
    serde_json::from_slice(&payload).ok()
}

fn write_frame(frame: &Value) {
    write_payload(&serde_json::to_vec(frame).unwrap());
}

fn write_payload(payload: &[u8]) {
    let mut bytes = u32::try_from(payload.len()).unwrap().to_be_bytes().to_vec();
    bytes.extend_from_slice(payload);
    let mut stderr = std::io::stderr().lock();
    if stderr
        .write_all(&bytes)
        .and_then(|()| stderr.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}

fn answer(id: u64, result: &Value) {
    write_frame(&json!({
        "kind": "response",
        "response": {"version": 1, "id": id, "ok": true, "result": result}
    }));
}

/// A tripped instruction budget, as the reference worker answers it (SPEC
/// §11.4: the `limit: KIND` context entry).
fn limit_error(id: u64) {
    write_frame(&json!({
        "kind": "response",
        "response": {
            "version": 1, "id": id, "ok": false, "result": null,
            "error": {
                "code": "resource_limit", "message": "Lua exceeded its instruction budget",
                "labels": [], "context": ["limit: instructions"],
                "help": [], "command": null, "exit_status": null
            }
        }
    }));
}

fn guest_error(id: u64, code: &str, message: &str) {
    write_frame(&json!({
        "kind": "response",
        "response": {
            "version": 1, "id": id, "ok": false, "result": null,
            "error": {
                "code": code, "message": message, "labels": [], "context": [],
                "help": [], "command": null, "exit_status": null
            }
        }
    }));
}
