//! `quirl-lua-fake-worker SCENARIO [PARAM]`: a scripted hostile worker.
//!
//! Test double for the parent's supervision tests; not a Lua worker. It
//! speaks just enough of `quirl.lua-worker@1` (frames on stdin/stderr) to
//! answer `initialize`, then misbehaves on the first request after it in the
//! way SCENARIO names (scenarios prefixed `init-` misbehave on `initialize`
//! itself). Deterministic: no randomness, no clocks except the explicit
//! delays a scenario names.
//!
//! Scenarios: `echo` (answers every request with result 1), `oversized-header`,
//! `header N` (declares N bytes then stalls), `malformed-json`,
//! `truncated-then-exit`, `wrong-response-id`, `wrong-version`,
//! `ok-and-error`, `host-call-wrong-request-id`, `host-call-id-zero`,
//! `host-calls N` (N sequential host calls, then answers), `never-answer`,
//! `answer-after MS`, `crash`, `exit0`, `grandchild-silent`,
//! `grandchild-exit`, `slow-loris`, `stdout-noise`, `guest-error`, `guest-limit` (well-formed
//! error responses, code `lua` / `resource_limit`), `retire-after-limit` (a
//! `resource_limit` error response, then exit 0, as the reference worker
//! retires a VM whose budget tripped), `fork-at-start` (a
//! holder grandchild from the start, then `echo`), `unsolicited` (an extra
//! response right after `initialize`, while the parent is idle),
//! `plugin-then-hang` (answers `load_plugin` with one prompt segment `spin`
//! declaring 8 ms, then never answers again); `hold` is the grandchild's
//! own mode (sleep forever holding the inherited pipes).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let scenario = args.next().unwrap_or_else(|| "echo".to_owned());
    let param = args.next();
    if scenario == "hold" {
        hang();
    }
    if scenario == "fork-at-start" {
        spawn_holder();
    }
    let misbehave_at = if scenario.starts_with("init-") { 1 } else { 2 };
    let scenario = scenario.trim_start_matches("init-").to_owned();
    let mut count = 0_u64;
    loop {
        let Some(frame) = read_frame() else {
            std::process::exit(0);
        };
        count += 1;
        let id = frame["request"]["id"].as_u64().unwrap_or(0);
        if scenario == "unsolicited" && count == 1 {
            // The answer and a response nobody asked for, in one write: the
            // extra frame is in the pipe before the parent sees the answer,
            // so the parent must find it however the threads are scheduled.
            let mut both = frame_bytes(&response_payload(id, "null"));
            both.extend(frame_bytes(&response_payload(id + 1, "1")));
            write_raw(&both);
            continue;
        }
        if scenario == "plugin-then-hang" && count == 2 {
            // load_plugin: one prompt segment declaring an 8 ms deadline.
            answer(
                id,
                r#"{"prompt_segments":[{"name":"spin","deadline_ms":8}],"completion_providers":[],"commands":[],"events":[],"contributions":[]}"#,
            );
            continue;
        }
        if scenario == "plugin-then-hang" && count > 2 {
            hang();
        }
        if scenario == "echo" || scenario == "fork-at-start" || count < misbehave_at {
            answer(id, if count == 1 { "null" } else { "1" });
            continue;
        }
        if scenario == "unsolicited" {
            // Already sent an extra frame right after initialize (below).
            answer(id, "1");
            continue;
        }
        misbehave(&scenario, param.as_deref(), id);
    }
}

fn misbehave(scenario: &str, param: Option<&str>, id: u64) {
    let number = || param.and_then(|p| p.parse::<u64>().ok()).unwrap_or(0);
    match scenario {
        "oversized-header" => {
            write_raw(&u32::MAX.to_be_bytes());
            hang();
        }
        "header" => {
            write_raw(&u32::try_from(number()).unwrap().to_be_bytes());
            hang();
        }
        "malformed-json" => {
            write_frame(br#"{"kind":"response","response":{"version":1,"#);
            hang();
        }
        "truncated-then-exit" => {
            write_raw(&100_u32.to_be_bytes());
            write_raw(br#"{"kind":"r"#);
            std::process::exit(0);
        }
        "wrong-response-id" => answer(id + 1, "1"),
        "wrong-version" => write_frame(
            format!(r#"{{"kind":"response","response":{{"version":2,"id":{id},"ok":true,"result":1}}}}"#)
                .as_bytes(),
        ),
        "ok-and-error" => write_frame(
            format!(
                r#"{{"kind":"response","response":{{"version":1,"id":{id},"ok":true,"result":1,"error":{{"code":"lua","message":"both","labels":[],"context":[],"help":[],"command":null,"exit_status":null}}}}}}"#
            )
            .as_bytes(),
        ),
        "host-call-wrong-request-id" => {
            host_call(id + 1, 1);
            hang();
        }
        "host-call-id-zero" => {
            host_call(id, 0);
            hang();
        }
        "host-calls" => {
            for call in 1..=number() {
                host_call(id, u32::try_from(call).unwrap_or(u32::MAX));
                if read_frame().is_none() {
                    std::process::exit(0);
                }
            }
            answer(id, "1");
        }
        "never-answer" => hang(),
        "answer-after" => {
            std::thread::sleep(Duration::from_millis(number()));
            answer(id, "1");
        }
        "crash" => std::process::abort(),
        "exit0" => std::process::exit(0),
        "grandchild-silent" | "grandchild-exit" => {
            spawn_holder();
            if scenario == "grandchild-exit" {
                std::process::exit(0);
            }
            hang();
        }
        "slow-loris" => {
            write_raw(&1000_u32.to_be_bytes());
            loop {
                write_raw(b" ");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        "guest-error" => guest_error(id, "lua"),
        "guest-limit" => guest_error(id, "resource_limit"),
        "retire-after-limit" => {
            guest_error(id, "resource_limit");
            std::process::exit(0);
        }
        "stdout-noise" => {
            println!("noise on stdout must not matter");
            answer(id, "1");
        }
        other => panic!("unknown scenario {other}"),
    }
}

/// Start a grandchild that inherits stderr (the response pipe) and the
/// process group, and sleeps forever.
fn spawn_holder() {
    let exe = std::env::current_exe().unwrap();
    let child = std::process::Command::new(exe)
        .arg("hold")
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Deliberately never waited for: the parent's group kill must end it.
    std::mem::forget(child);
}

fn hang() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn read_frame() -> Option<serde_json::Value> {
    let mut stdin = std::io::stdin().lock();
    let mut header = [0_u8; 4];
    stdin.read_exact(&mut header).ok()?;
    let mut payload = vec![0_u8; usize::try_from(u32::from_be_bytes(header)).ok()?];
    stdin.read_exact(&mut payload).ok()?;
    serde_json::from_slice(&payload).ok()
}

fn write_raw(bytes: &[u8]) {
    let mut stderr = std::io::stderr().lock();
    if stderr
        .write_all(bytes)
        .and_then(|()| stderr.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}

fn frame_bytes(payload: &[u8]) -> Vec<u8> {
    let mut bytes = u32::try_from(payload.len()).unwrap().to_be_bytes().to_vec();
    bytes.extend_from_slice(payload);
    bytes
}

fn write_frame(payload: &[u8]) {
    write_raw(&frame_bytes(payload));
}

fn response_payload(id: u64, result: &str) -> Vec<u8> {
    format!(
        r#"{{"kind":"response","response":{{"version":1,"id":{id},"ok":true,"result":{result}}}}}"#
    )
    .into_bytes()
}

fn answer(id: u64, result: &str) {
    write_frame(&response_payload(id, result));
}

fn guest_error(id: u64, code: &str) {
    write_frame(
        format!(
            r#"{{"kind":"response","response":{{"version":1,"id":{id},"ok":false,"result":null,"error":{{"code":"{code}","message":"guest failed","labels":[],"context":[],"help":[],"command":null,"exit_status":null}}}}}}"#
        )
        .as_bytes(),
    );
}

fn host_call(request_id: u64, call_id: u32) {
    write_frame(
        format!(
            r#"{{"kind":"host_call","call":{{"request_id":{request_id},"call_id":{call_id},"command":"echo hi","deadline_ms":1000,"max_output_bytes":1024}}}}"#
        )
        .as_bytes(),
    );
}
