//! `quirl-conformance fake-worker CASE --pid-file FILE`: a scripted worker.
//!
//! It plays the `worker` script of the parent case CASE (from the embedded
//! `cases/parent.json`) on stdin (frames from the parent) and stderr
//! (frames to the parent). Everything it reads is decoded strictly and must
//! be canonical and in sequence: a parent that sends anything else is
//! recorded as `parent_error` and the fake worker exits with status 3.
//!
//! The record file (FILE, appended to, one line per fact) tells the runner:
//!
//! ```text
//! pid <pid> <start-time> <role>          this process (role worker) or a holder grandchild
//! spawn <pgid> <sid> <tty> <stdout> <env-leaked> <fds> <ppid> <leader-ppid>
//!                                                         how the parent started it
//! init <wall_time_ms> <allow_process> <process_enabled> <memory_limit_bytes> <instruction_limit> <grants as JSON>
//!                                                         the initialize it was given
//! request <monotonic-ns> <operation> <id>                when a request was read
//! parent_error <text>                                    the parent broke the protocol
//! ```

use crate::parent::cases::{FakeHostCall, FakePadded, FakeSlowly, FakeStep, ParentCaseData};
use crate::proc;
use quirl_lua_protocol::blocking::FrameReader;
use quirl_lua_protocol::records::{Operation, ParentFrame};
use quirl_lua_protocol::{
    LUA_WORKER_PROTOCOL_DESCRIPTOR, decode_parent_frame, decode_worker_frame, encode_parent_frame,
    encode_worker_frame,
};
use serde_json::{Value, json};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Environment variable the runner sets on the parent under test; a worker
/// that sees it was given the parent's environment (§3.1 SHOULD).
pub const SENTINEL_ENV: &str = "QUIRL_CONFORMANCE_SENTINEL";

/// Role name of the hidden holder mode.
pub const HOLDER_CASE: &str = "__holder";

/// Exit status when the parent broke the protocol.
const PARENT_ERROR_EXIT: i32 = 3;

/// The unique `sleep` argument for host-call commands of one case run,
/// derived from the record file's path (FNV-1a), e.g. `30.123456789`.
pub fn marker(pid_file: &Path) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in pid_file.as_os_str().as_encoded_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("30.{:09}", hash % 1_000_000_000)
}

/// Entry point of the `fake-worker` subcommand.
pub fn main(case: &str, pid_file: &Path) -> ExitCode {
    let facts = spawn_facts();
    let record = match OpenOptions::new().create(true).append(true).open(pid_file) {
        Ok(file) => file,
        Err(_) => return ExitCode::from(2),
    };
    let mut fake = Fake {
        record,
        input: FrameReader::new(std::io::stdin().lock()),
        pid_file: pid_file.to_path_buf(),
        last_id: None,
        in_flight: None,
        calls: 0,
        host_results: Vec::new(),
    };
    let role = if case == HOLDER_CASE {
        "holder"
    } else {
        "worker"
    };
    fake.note(&format!(
        "pid {} {} {role}",
        proc::own_pid(),
        proc::stat(proc::own_pid()).map_or(0, |s| s.start_time)
    ));
    if case == HOLDER_CASE {
        hang();
    }
    fake.note(&facts);
    let Some(data) = crate::parent::find_case(case) else {
        fake.note(&format!("parent_error no such case {case}"));
        return ExitCode::from(2);
    };
    let code = fake.play(&data);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// `spawn <pgid> <sid> <tty> <stdout> <env-leaked> <fds> <ppid> <leader-ppid>`
/// (the last: the parent of the group's leader, -1 when it cannot be read).
fn spawn_facts() -> String {
    // Read from /proc rather than getpgid/getsid: inside a PID namespace
    // whose session or group leader lives outside it, both ids are 0, which
    // rustix's `Pid` cannot hold (it asserts a positive id).
    let own = proc::stat(proc::own_pid());
    let pgid = own.as_ref().map_or(-1, |s| s.pgrp);
    let sid = own.as_ref().map_or(-1, |s| s.session);
    let tty = own.as_ref().map_or(-1, |s| s.tty_nr);
    let stdout = std::fs::read_link("/proc/self/fd/1")
        .map_or_else(|_| "closed".to_owned(), |p| p.display().to_string());
    let leaked = u8::from(std::env::var_os(SENTINEL_ENV).is_some());
    let mut extra = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
        for entry in entries.flatten() {
            let Some(fd) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            let target = std::fs::read_link(entry.path())
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            // The directory listing itself holds one descriptor.
            if fd > 2 && !target.ends_with("/fd") {
                extra.push(format!("{fd}={}", target.replace(' ', "_")));
            }
        }
    }
    let fds = if extra.is_empty() {
        "-".to_owned()
    } else {
        extra.join(",")
    };
    let ppid = own.as_ref().map_or(-1, |s| s.ppid);
    let leader_ppid = proc::stat(pgid).map_or(-1, |s| s.ppid);
    format!(
        "spawn {pgid} {sid} {tty} {} {leaked} {fds} {ppid} {leader_ppid}",
        stdout.replace(' ', "_")
    )
}

fn hang() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

struct Fake {
    record: File,
    /// The parent's frames (stdin), kept across reads: a frame split over
    /// many reads, or several in one, loses nothing (SPEC §3.1). No session:
    /// this worker checks the parent's sequence itself and may misbehave.
    input: FrameReader<std::io::StdinLock<'static>>,
    pid_file: PathBuf,
    last_id: Option<u64>,
    in_flight: Option<u64>,
    calls: u64,
    host_results: Vec<Value>,
}

enum Flow {
    Go,
    Exit(i32),
}

impl Fake {
    fn note(&mut self, line: &str) {
        let mut text = line.replace('\n', " ");
        text.push('\n');
        let _ = self.record.write_all(text.as_bytes());
    }

    fn parent_error(&mut self, text: &str) -> Flow {
        self.note(&format!("parent_error {text}"));
        Flow::Exit(PARENT_ERROR_EXIT)
    }

    fn play(&mut self, data: &ParentCaseData) -> i32 {
        for step in &data.worker {
            match self.step(step) {
                Flow::Go => {}
                Flow::Exit(code) => return code,
            }
        }
        // Script done: serve nothing more; a clean end of input ends us.
        match self.read_frame() {
            Ok(None) => 0,
            Ok(Some(frame)) => {
                let what = match frame {
                    ParentFrame::Request { request } => {
                        format!("a {} request", request.operation.kind().as_str())
                    }
                    ParentFrame::HostResponse { .. } => "a host response".to_owned(),
                };
                self.note(&format!("unexpected {what} after the script"));
                0
            }
            Err(Flow::Exit(code)) => code,
            Err(Flow::Go) => 0,
        }
    }

    /// Read and strictly check one frame; `Ok(None)` at a clean end.
    fn read_frame(&mut self) -> Result<Option<ParentFrame>, Flow> {
        let payload = match self.input.next_payload() {
            Ok(Some(payload)) => payload,
            Ok(None) => return Ok(None),
            Err(error) => {
                return Err(self.parent_error(&format!(
                    "the parent sent a bad frame: {}: {}",
                    error.kind(),
                    error.message()
                )));
            }
        };
        let frame = match decode_parent_frame(&payload) {
            Ok(frame) => frame,
            Err(error) => {
                return Err(self.parent_error(&format!(
                    "the parent sent an invalid frame ({}): {}",
                    error.kind(),
                    error.message()
                )));
            }
        };
        match encode_parent_frame(&frame) {
            Ok(canonical) if canonical == payload => {}
            _ => {
                return Err(self.parent_error(&format!(
                    "the parent sent a frame that is not canonical (§12.1): {}",
                    String::from_utf8_lossy(&payload)
                        .chars()
                        .take(300)
                        .collect::<String>()
                )));
            }
        }
        Ok(Some(frame))
    }

    fn substitute(&self, text: &str) -> String {
        let id = self.in_flight.or(self.last_id).unwrap_or(0);
        let text = text
            .replace("${ID+1}", &id.saturating_add(1).to_string())
            .replace("${ID-1}", &id.saturating_sub(1).to_string())
            .replace("${ID}", &id.to_string())
            .replace("${DESCRIPTOR}", LUA_WORKER_PROTOCOL_DESCRIPTOR)
            .replace("${MARKER}", &marker(&self.pid_file));
        crate::worker::script::expand_repeats(&text)
    }

    fn write_raw(&mut self, bytes: &[u8]) -> Flow {
        let mut stderr = std::io::stderr().lock();
        if stderr
            .write_all(bytes)
            .and_then(|()| stderr.flush())
            .is_err()
        {
            // The parent closed the pipe: it has given up on us.
            return Flow::Exit(0);
        }
        Flow::Go
    }

    fn write_payload(&mut self, payload: &[u8]) -> Flow {
        let length = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let mut bytes = length.to_be_bytes().to_vec();
        bytes.extend_from_slice(payload);
        self.write_raw(&bytes)
    }

    /// Write a JSON frame, canonical when it is a valid worker frame.
    fn write_json(&mut self, value: &Value) -> Flow {
        let bytes = serde_json::to_vec(value).unwrap_or_default();
        let payload = match decode_worker_frame(&bytes) {
            Ok(frame) => encode_worker_frame(&frame).unwrap_or(bytes),
            Err(_) => bytes,
        };
        self.write_payload(&payload)
    }

    fn step(&mut self, step: &FakeStep) -> Flow {
        match step {
            FakeStep::Read(operation) => self.read_request(operation),
            FakeStep::Answer(result) => self.answer(result),
            FakeStep::AnswerError(error) => self.answer_error(error),
            FakeStep::AnswerHostSummary(_) => self.answer_host_summary(),
            FakeStep::AnswerHostLines(_) => self.answer_host_lines(),
            FakeStep::Write(text) => {
                let text = self.substitute(text);
                self.write_payload(text.as_bytes())
            }
            FakeStep::WriteMany(texts) => self.write_many(texts),
            FakeStep::WriteBytes(hex) => match crate::worker::script::hex(hex) {
                Ok(bytes) => self.write_raw(&bytes),
                Err(_) => Flow::Exit(2),
            },
            FakeStep::WriteHeader(length) => self.write_raw(&length.to_be_bytes()),
            FakeStep::WritePadded(padded) => self.write_padded(padded),
            FakeStep::WriteSlowly(slowly) => self.write_slowly(slowly),
            FakeStep::FloodStdout(bytes) => flood_stdout(*bytes),
            FakeStep::HostCall(call) => self.host_call(call),
            FakeStep::SleepMs(ms) => {
                std::thread::sleep(Duration::from_millis(*ms));
                Flow::Go
            }
            FakeStep::Hang(_) => hang(),
            FakeStep::Exit(code) => Flow::Exit(*code),
            FakeStep::Signal(name) => die_of(name),
            FakeStep::CloseOutput(_) => close_output(),
            FakeStep::IgnoreSigterm(_) => ignore_sigterm(),
            FakeStep::ForkHolder(_) => self.fork_holder(),
        }
    }

    /// A success response to the request in flight.
    fn answer(&mut self, result: &Value) -> Flow {
        let id = self.in_flight.take().unwrap_or(0);
        self.write_json(&json!({
            "kind": "response",
            "response": {"version": 1, "id": id, "ok": true, "result": result},
        }))
    }

    /// An error response to the request in flight.
    fn answer_error(&mut self, error: &Value) -> Flow {
        let id = self.in_flight.take().unwrap_or(0);
        let code = error.get("code").cloned().unwrap_or(json!("lua"));
        let message = error.get("message").cloned().unwrap_or(json!("scripted"));
        self.write_json(&json!({
            "kind": "response",
            "response": {"version": 1, "id": id, "ok": false, "result": null, "error": {
                "code": code, "message": message, "labels": [], "context": [],
                "help": [], "command": null, "exit_status": null}},
        }))
    }

    /// A success response whose result lists the host calls' outcomes.
    fn answer_host_summary(&mut self) -> Flow {
        let id = self.in_flight.take().unwrap_or(0);
        let summary = Value::Array(self.host_results.clone());
        self.write_json(&json!({
            "kind": "response",
            "response": {"version": 1, "id": id, "ok": true, "result": summary},
        }))
    }

    /// A success response whose result lists the host calls' outcomes as
    /// the sorted lines of their stdout (errors as in the summary).
    fn answer_host_lines(&mut self) -> Flow {
        let id = self.in_flight.take().unwrap_or(0);
        let lines: Vec<Value> = self
            .host_results
            .iter()
            .map(
                |result| match result.get("stdout").and_then(Value::as_str) {
                    Some(stdout) => {
                        let mut lines: Vec<&str> = stdout.lines().collect();
                        lines.sort_unstable();
                        json!(lines)
                    }
                    None => result.clone(),
                },
            )
            .collect();
        self.write_json(&json!({
            "kind": "response",
            "response": {"version": 1, "id": id, "ok": true, "result": lines},
        }))
    }

    /// Several frames written in one go.
    fn write_many(&mut self, texts: &[String]) -> Flow {
        let mut bytes = Vec::new();
        for text in texts {
            let text = self.substitute(text);
            let length = u32::try_from(text.len()).unwrap_or(u32::MAX);
            bytes.extend_from_slice(&length.to_be_bytes());
            bytes.extend_from_slice(text.as_bytes());
        }
        self.write_raw(&bytes)
    }

    /// A frame padded to a size, optionally declaring another length.
    fn write_padded(&mut self, padded: &FakePadded) -> Flow {
        let prefix = self.substitute(&padded.prefix);
        let suffix = self.substitute(&padded.suffix);
        let mut payload = prefix.into_bytes();
        payload.reserve(padded.count * padded.fill.len() + suffix.len());
        for _ in 0..padded.count {
            payload.extend_from_slice(padded.fill.as_bytes());
        }
        payload.extend_from_slice(suffix.as_bytes());
        let declared = padded
            .declare
            .unwrap_or_else(|| u32::try_from(payload.len()).unwrap_or(u32::MAX));
        let mut bytes = declared.to_be_bytes().to_vec();
        bytes.extend_from_slice(&payload);
        self.write_raw(&bytes)
    }

    /// A frame written in chunks with pauses between them.
    fn write_slowly(&mut self, slowly: &FakeSlowly) -> Flow {
        let text = self.substitute(&slowly.text);
        let length = u32::try_from(text.len()).unwrap_or(u32::MAX);
        let mut bytes = length.to_be_bytes().to_vec();
        bytes.extend_from_slice(text.as_bytes());
        for piece in bytes.chunks(slowly.chunk.max(1)) {
            if let Flow::Exit(code) = self.write_raw(piece) {
                return Flow::Exit(code);
            }
            std::thread::sleep(Duration::from_millis(slowly.interval_ms));
        }
        Flow::Go
    }

    /// Start a holder grandchild that outlives this process unless the
    /// parent kills the whole group.
    fn fork_holder(&mut self) -> Flow {
        let exe = std::env::current_exe().unwrap_or_default();
        let spawned = std::process::Command::new(exe)
            .arg("fake-worker")
            .arg(HOLDER_CASE)
            .arg("--pid-file")
            .arg(&self.pid_file)
            .spawn();
        match spawned {
            Ok(child) => {
                // Never waited for: the holder must outlive us
                // unless the parent kills the whole group.
                std::mem::forget(child);
                // Give it time to record its pid.
                std::thread::sleep(Duration::from_millis(100));
                Flow::Go
            }
            Err(error) => {
                self.note(&format!("note cannot start the holder: {error}"));
                Flow::Exit(2)
            }
        }
    }

    fn read_request(&mut self, operation: &str) -> Flow {
        let frame = match self.read_frame() {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                self.note("closed the parent closed our input");
                return Flow::Exit(0);
            }
            Err(flow) => return flow,
        };
        let ParentFrame::Request { request } = frame else {
            return self.parent_error(&format!(
                "expected a {operation} request, got a host response"
            ));
        };
        let kind = request.operation.kind().as_str();
        self.note(&format!(
            "request {} {kind} {}",
            proc::monotonic_ns(),
            request.id
        ));
        if kind != operation {
            return self.parent_error(&format!("expected a {operation} request, got {kind}"));
        }
        if let Some(last) = self.last_id
            && request.id <= last
        {
            return self.parent_error(&format!(
                "request id {} does not exceed the previous id {last} (§9.1)",
                request.id
            ));
        }
        if let Operation::Initialize {
            policy,
            process_enabled,
            grants,
            ..
        } = &request.operation
        {
            self.note(&format!(
                "init {} {} {process_enabled} {} {} {}",
                policy.wall_time_ms(),
                policy.allow_process(),
                policy.memory_limit_bytes(),
                policy.instruction_limit(),
                serde_json::to_string(grants).unwrap_or_default()
            ));
        }
        self.last_id = Some(request.id);
        self.in_flight = Some(request.id);
        self.calls = 0;
        Flow::Go
    }

    fn host_call(&mut self, call: &FakeHostCall) -> Flow {
        for _ in 0..call.repeat.unwrap_or(1) {
            let in_flight = self.in_flight.or(self.last_id).unwrap_or(0);
            let request_id = if call.request_id_offset >= 0 {
                in_flight.saturating_add(call.request_id_offset.unsigned_abs())
            } else {
                in_flight.saturating_sub(call.request_id_offset.unsigned_abs())
            };
            let call_id = call.call_id.unwrap_or(self.calls + 1);
            self.calls = call_id;
            let command = self.substitute(&call.command);
            let flow = self.write_json(&json!({
                "kind": "host_call",
                "call": {
                    "request_id": request_id,
                    "call_id": call_id,
                    "command": command,
                    "deadline_ms": call.deadline_ms.unwrap_or(60_000),
                    "max_output_bytes": call.max_output_bytes.unwrap_or(1_048_576),
                },
            }));
            if let Flow::Exit(code) = flow {
                return Flow::Exit(code);
            }
            if !call.read_answer.unwrap_or(true) {
                continue;
            }
            let frame = match self.read_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => {
                    self.note("closed the parent closed our input during a host call");
                    return Flow::Exit(0);
                }
                Err(flow) => return flow,
            };
            let ParentFrame::HostResponse { response } = frame else {
                return self.parent_error("expected a host response, got a request (§9.2)");
            };
            if response.request_id != request_id || u64::from(response.call_id) != call_id {
                return self.parent_error(&format!(
                    "the host response echoes request {} call {}, not request {request_id} call {call_id} (§9.2)",
                    response.request_id, response.call_id
                ));
            }
            self.host_results.push(match &response.result {
                Ok(outcome) => json!({
                    "status": outcome.status,
                    "stdout": outcome.stdout,
                    "stderr": outcome.stderr,
                }),
                Err(error) => json!({"error": true, "code": error.code.as_str()}),
            });
        }
        Flow::Go
    }
}

/// Write `bytes` of filler to stdout, which a parent must not read as frames.
fn flood_stdout(bytes: usize) -> Flow {
    let chunk = vec![b'x'; 64 * 1024];
    let mut left = bytes;
    let mut stdout = std::io::stdout().lock();
    while left > 0 {
        let n = left.min(chunk.len());
        if stdout.write_all(&chunk[..n]).is_err() {
            break;
        }
        left -= n;
    }
    let _ = stdout.flush();
    Flow::Go
}

/// End the frame stream without exiting.
fn close_output() -> Flow {
    // The frame stream ends: descriptor 2 stops referring to the
    // pipe (it becomes /dev/null, so later writes vanish instead
    // of landing on a reused descriptor number).
    if let Ok(null) = File::open("/dev/null") {
        let _ = rustix::stdio::dup2_stderr(&null);
    }
    Flow::Go
}

/// Ignore SIGTERM, so only SIGKILL ends this process.
fn ignore_sigterm() -> Flow {
    // SAFETY: sets the disposition of SIGTERM to ignore; no
    // handler runs. No safe library sets a disposition (rustix
    // offers `sigaction` only as an unsafe runtime call).
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
    Flow::Go
}

fn die_of(name: &str) -> Flow {
    let signal = match name {
        "SEGV" => libc::SIGSEGV,
        "ABRT" => libc::SIGABRT,
        "KILL" => libc::SIGKILL,
        "TERM" => libc::SIGTERM,
        _ => libc::SIGKILL,
    };
    let no_core = rustix::process::Rlimit {
        current: Some(0),
        maximum: Some(0),
    };
    let _ = rustix::process::setrlimit(rustix::process::Resource::Core, no_core);
    // SAFETY: restores the default action of one signal and raises it
    // against this process; no handler of ours is left to run. The Rust
    // runtime installs its own SIGSEGV handler, and no safe library resets a
    // disposition (rustix offers `sigaction` only as an unsafe runtime call).
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    Flow::Exit(1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn marker_is_a_sleep_argument_and_depends_on_the_path() {
        let a = marker(Path::new("/tmp/a/pids"));
        let b = marker(Path::new("/tmp/b/pids"));
        assert_ne!(a, b);
        assert!(a.starts_with("30.") && a.len() == 12, "{a}");
        assert!(a.parse::<f64>().is_ok());
    }

    #[test]
    fn spawn_facts_name_the_group_and_stdout() {
        let facts = spawn_facts();
        let parts: Vec<&str> = facts.split(' ').collect();
        assert_eq!(parts[0], "spawn");
        assert_eq!(parts.len(), 9, "{facts}");
        // Group and session are read even where they are 0 (a PID namespace
        // whose leaders live outside it); -1 would mean they were not.
        let own = proc::stat(proc::own_pid()).unwrap();
        assert_eq!(parts[1].parse::<i32>().unwrap(), own.pgrp, "{facts}");
        assert_eq!(parts[2].parse::<i32>().unwrap(), own.session, "{facts}");
        assert!(own.pgrp >= 0 && own.session >= 0, "{facts}");
        assert_eq!(parts[7].parse::<i32>().unwrap(), own.ppid, "{facts}");
    }
}
