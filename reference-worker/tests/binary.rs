//! The real `quirl-worker` binary: stdio, exit statuses, the Quirl fixture,
//! limits, and every reject fixture of `fixtures/manifest.json`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::LUA_WORKER_PROTOCOL_DESCRIPTOR;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_quirl-worker");

struct Run {
    status: Option<i32>,
    output: Vec<u8>,
}

/// Feed `input` to a fresh worker, close stdin, collect stderr, and reap
/// it (killing it if it is still alive after `limit`).
fn run_worker(input: Vec<u8>, limit: Duration) -> Run {
    let mut child = Command::new(WORKER)
        .arg("--internal-lua-worker-v1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        // The worker may stop reading early (a violation); that is fine.
        let _ = stdin.write_all(&input);
    });
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stderr.read_to_end(&mut out);
        out
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            child.kill().unwrap();
            let _ = child.wait().unwrap();
            panic!("the worker did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    writer.join().unwrap();
    Run {
        status: status.code(),
        output: reader.join().unwrap(),
    }
}

fn frame(value: &Value) -> Vec<u8> {
    let payload = serde_json::to_vec(value).unwrap();
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend(payload);
    out
}

fn initialize() -> Vec<u8> {
    frame(
        &json!({"kind": "request", "request": {"version": 1, "id": 1, "operation": {
        "operation": "initialize", "protocol_descriptor": LUA_WORKER_PROTOCOL_DESCRIPTOR,
        "policy": {"allow_process": false, "memory_limit_bytes": 8_388_608,
                   "instruction_limit": 2_000_000, "wall_time_ms": 1_000},
        "grants": null, "process_enabled": false}}}),
    )
}

fn eval(id: u64, source: &str) -> Vec<u8> {
    frame(
        &json!({"kind": "request", "request": {"version": 1, "id": id,
        "operation": {"operation": "eval", "source": source}}}),
    )
}

fn frames(output: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut rest = output;
    while rest.len() >= 4 {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        out.push(serde_json::from_slice(&rest[4..4 + len]).unwrap());
        rest = &rest[4 + len..];
    }
    assert!(rest.is_empty(), "the worker wrote a partial frame");
    out
}

#[test]
fn answers_the_quirl_fixture_byte_for_byte_and_exits_zero_at_eof() {
    let fixture = std::fs::read(fixtures().join("frames/quirl_request_fixture_v1.bin")).unwrap();
    let expected = std::fs::read(fixtures().join("frames/quirl_response_fixture_v1.bin")).unwrap();
    let mut input = initialize();
    input.extend(fixture);
    let run = run_worker(input, Duration::from_secs(10));
    assert_eq!(run.status, Some(0));
    assert!(run.output.ends_with(&expected));
    assert_eq!(frames(&run.output).len(), 2);
}

#[test]
fn an_empty_input_is_a_clean_end() {
    let run = run_worker(Vec::new(), Duration::from_secs(10));
    assert_eq!(run.status, Some(0));
    assert!(run.output.is_empty());
}

// SPEC §3.3-a, §9.6-a: a repeated request id ends the worker nonzero, with no further frame.
#[test]
fn a_violation_exits_nonzero_without_another_frame() {
    let mut input = initialize();
    input.extend(eval(1, "return 1"));
    let run = run_worker(input, Duration::from_secs(10));
    assert_eq!(run.status, Some(1));
    assert_eq!(frames(&run.output).len(), 1);
}

// SPEC §13.1-a, §15.1-g: pcall cannot swallow the limit; the worker answers resource_limit, then
// retires (exit 0, nothing more served).
#[test]
fn a_tripped_limit_is_answered_then_the_worker_exits() {
    let mut input = initialize();
    input.extend(eval(
        2,
        "for i = 1, 1e9 do pcall(function() while true do end end) end return 1",
    ));
    input.extend(eval(3, "return 2"));
    let run = run_worker(input, Duration::from_secs(10));
    assert_eq!(run.status, Some(0));
    let frames = frames(&run.output);
    assert_eq!(
        frames.len(),
        2,
        "nothing after the limit response: {frames:?}"
    );
    assert_eq!(frames[1]["response"]["error"]["code"], "resource_limit");
}

// SPEC §13.1-a, §15.1-b
#[test]
fn a_memory_bomb_is_answered_then_the_worker_exits() {
    let mut input = initialize();
    input.extend(eval(2, "local s = 'x' while true do s = s .. s end"));
    let run = run_worker(input, Duration::from_secs(10));
    assert_eq!(run.status, Some(0));
    let frames = frames(&run.output);
    assert_eq!(frames[1]["response"]["error"]["code"], "resource_limit");
    assert!(
        frames[1]["response"]["error"]["context"]
            .as_array()
            .unwrap()
            .contains(&json!("limit: memory"))
    );
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

// SPEC §5-a, §3.3-a, §9.6-a: every reject fixture ends the worker nonzero without another frame.
#[test]
fn every_reject_fixture_ends_the_worker_without_a_success() {
    let manifest: Vec<Value> =
        serde_json::from_slice(&std::fs::read(fixtures().join("manifest.json")).unwrap()).unwrap();
    let rejects: Vec<&Value> = manifest
        .iter()
        .filter(|e| e["direction"] == "parent_to_worker" && e["expect"] == "reject")
        .collect();
    assert!(rejects.len() > 100);
    for entry in rejects {
        let bytes = std::fs::read(fixtures().join(entry["file"].as_str().unwrap())).unwrap();
        // Alone: nothing is written at all.
        let run = run_worker(bytes.clone(), Duration::from_secs(10));
        assert_ne!(run.status, Some(0), "{entry}");
        assert!(run.output.is_empty(), "{entry}");
        // After a valid initialize: only the initialize answer is written.
        let mut input = initialize();
        input.extend(bytes);
        let run = run_worker(input, Duration::from_secs(10));
        assert_ne!(run.status, Some(0), "{entry}");
        assert_eq!(frames(&run.output).len(), 1, "{entry}");
    }
}

fn host_enabled_initialize() -> Vec<u8> {
    frame(
        &json!({"kind": "request", "request": {"version": 1, "id": 1, "operation": {
        "operation": "initialize", "protocol_descriptor": LUA_WORKER_PROTOCOL_DESCRIPTOR,
        "policy": {"allow_process": true, "memory_limit_bytes": 8_388_608,
                   "instruction_limit": 2_000_000, "wall_time_ms": 1_000},
        "grants": null, "process_enabled": true}}}),
    )
}

fn host_response(request_id: u64, call_id: u32) -> Vec<u8> {
    frame(
        &json!({"kind": "host_response", "response": {"request_id": request_id,
        "call_id": call_id, "outcome": {"status": 0, "stdout": "", "stderr": ""}}}),
    )
}

// SPEC §3.3-a, §9.6-a, §15.1-h: no answer to the violation, and the guarded pcall never returns.
#[test]
fn hostile_parent_sequences_end_the_worker_without_a_success() {
    let guarded = "local ok = pcall(quirl.process.run, 'ls') return 'survived'";
    let cases: Vec<(&str, Vec<u8>, usize)> = vec![
        ("request before initialize", eval(1, "return 1"), 0),
        (
            "second initialize",
            [initialize(), host_enabled_initialize()].concat(),
            1,
        ),
        (
            "host response without a host call",
            [initialize(), host_response(1, 1)].concat(),
            1,
        ),
        (
            "wrong call id",
            [
                host_enabled_initialize(),
                eval(2, guarded),
                host_response(2, 2),
            ]
            .concat(),
            2,
        ),
        (
            "wrong request id",
            [
                host_enabled_initialize(),
                eval(2, guarded),
                host_response(9, 1),
            ]
            .concat(),
            2,
        ),
        (
            "request while a host call is pending",
            [
                host_enabled_initialize(),
                eval(2, guarded),
                eval(3, "return 1"),
            ]
            .concat(),
            2,
        ),
    ];
    for (name, input, frames_written) in cases {
        let run = run_worker(input, Duration::from_secs(10));
        assert_eq!(run.status, Some(1), "{name}");
        let frames = frames(&run.output);
        assert_eq!(frames.len(), frames_written, "{name}: {frames:?}");
        assert!(
            frames.iter().skip(1).all(|f| f["response"]["ok"] != true),
            "{name}: {frames:?}"
        );
    }
}

// SPEC §15.1-f: quirl.process.run becomes a host call.
#[test]
fn a_host_call_round_trip_through_the_binary() {
    let input = [
        host_enabled_initialize(),
        eval(2, "return quirl.process.run('ls').ok"),
        host_response(2, 1),
    ]
    .concat();
    let run = run_worker(input, Duration::from_secs(10));
    assert_eq!(run.status, Some(0));
    let frames = frames(&run.output);
    assert_eq!(frames[1]["kind"], "host_call");
    assert_eq!(frames[2]["response"]["result"], true);
}

/// Spawn the worker as a parent must start it (SPEC §3.1): a session of its
/// own, no terminal descriptor; both output streams piped so that a test can
/// see every byte of each.
fn spawn_in_own_session(args: &[&str]) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(WORKER);
    command
        .arg("--internal-lua-worker-v1")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the forked child before exec and only calls
    // setsid(2), which is async-signal-safe and touches no shared state.
    unsafe {
        command.pre_exec(|| {
            rustix::process::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    command.spawn().unwrap()
}

/// Write `input`, close the input, and collect both output streams to their
/// end and the exit status.
fn run_in_own_session(args: &[&str], input: Vec<u8>) -> (std::process::Output, usize) {
    let mut child = spawn_in_own_session(args);
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        // The worker may stop reading early (a violation, a probe).
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let written = frames(&output.stderr).len();
    (output, written)
}

// SPEC §3.1-a, §3.1-b: with standard output piped instead of the null
// device, a session of guest errors, a syntax error, results and a violation
// writes nothing there, and standard error holds complete frames only.
#[test]
fn only_complete_frames_reach_the_streams_in_a_session() {
    let input = [
        initialize(),
        eval(2, "error('boom')"),
        eval(3, "return +"),
        eval(4, "return ('x'):rep(10)"),
        eval(5, "return 1"),
        eval(5, "return 1"),
    ]
    .concat();
    let (output, written) = run_in_own_session(&[], input);
    assert!(output.stdout.is_empty(), "{:?}", output.stdout);
    // initialize, two guest errors, two results; the repeated id 5 is a
    // violation that gets no answer.
    assert_eq!(written, 5);
    assert_eq!(output.status.code(), Some(1));
}

// SPEC §3.1-a, §3.1-b: a panic, an abort and a stack overflow inside a
// request (the debug build's test probes, DESIGN §18.5) leave no message on
// either stream: standard error holds exactly the frames answered before.
#[test]
fn a_crashing_worker_writes_no_diagnostics_to_its_streams() {
    for probe in ["panic", "abort", "stack-overflow"] {
        let argument = format!("--lockdown-test-probe={probe}");
        let input = [initialize(), eval(2, "return 1")].concat();
        let (output, written) = run_in_own_session(&[&argument], input);
        assert!(output.stdout.is_empty(), "{probe}: {:?}", output.stdout);
        assert_eq!(written, 1, "{probe}: only the initialize answer");
        assert!(!output.status.success(), "{probe}: {:?}", output.status);
    }
}

/// Field `tty_nr` of `/proc/PID/stat`, and every terminal among the
/// descriptors of `pid`.
fn terminal_of(pid: u32) -> (i64, Vec<String>) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name: state ppid pgrp session tty_nr …
    let (_, fields) = stat.rsplit_once(')').unwrap();
    let tty_nr = fields.split_whitespace().nth(4).unwrap().parse().unwrap();
    let terminals = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.unwrap().path()).ok())
        .map(|target| target.to_string_lossy().into_owned())
        .filter(|target| {
            ["/dev/pts/", "/dev/tty", "/dev/console", "/dev/ptmx"]
                .iter()
                .any(|prefix| target.starts_with(prefix))
        })
        .collect();
    (tty_nr, terminals)
}

// SPEC §3.1-c: started without a terminal, the worker neither opens one nor
// gains a controlling terminal, before or after initialize and a request.
#[test]
fn the_worker_opens_no_terminal() {
    let mut child = spawn_in_own_session(&[]);
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut read_frame = move || {
        let mut header = [0u8; 4];
        stderr.read_exact(&mut header).unwrap();
        let mut payload = vec![0u8; u32::from_be_bytes(header) as usize];
        stderr.read_exact(&mut payload).unwrap();
        serde_json::from_slice::<Value>(&payload).unwrap()
    };
    stdin.write_all(&initialize()).unwrap();
    assert_eq!(read_frame()["response"]["ok"], true);
    assert_eq!(terminal_of(pid), (0, Vec::new()));
    stdin
        .write_all(&eval(2, "return tostring(io) .. tostring(os)"))
        .unwrap();
    assert_eq!(read_frame()["response"]["result"], "nilnil");
    assert_eq!(terminal_of(pid), (0, Vec::new()));
    drop(stdin);
    assert_eq!(child.wait().unwrap().code(), Some(0));
}
