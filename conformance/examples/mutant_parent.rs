//! A parent under the command-line contract of SPEC §19.3, written on the
//! protocol crate alone, with one defect chosen by `--break MUTATION`
//! (`tests/parent_mutants.rs` shows that each defect fails exactly the
//! parent cases of the rule it breaks; unmutated, it passes the suite).
//!
//! ```text
//! mutant_parent [--break MUTATION] --wall-time-ms W [--allow-process] [--grant CAP]… eval SOURCE
//! ```
//!
//! It is also a small but complete host: the worker named by
//! `QUIRL_LUA_WORKER` is started as SPEC §3.1 says, driven with typed calls
//! (`operations::{Initialize, Eval}`), its exit noticed through a
//! `Cancellation` predicate even while a descendant holds its stream
//! (§9.5-a), and ended as §13.2 says; its host calls are run by a process
//! host that follows §16.1 and §19.3 (grants, a POSIX word splitter that
//! refuses every other shell construct, `PATH` and a private `HOME` and `TMPDIR` only, the parent's
//! working directory, stdin the null device, output capped, the deadline).

// The process host answers with the wire's own error record (SPEC §6.9),
// as the protocol crate's `call_with_host` callbacks do.
#![allow(clippy::result_large_err)]

use quirl_lua_protocol::ProtocolError;
use quirl_lua_protocol::blocking::ParentClient;
use quirl_lua_protocol::cancellation::Cancellation;
use quirl_lua_protocol::operations::{Eval, Initialize};
use quirl_lua_protocol::records::{
    CommandOutcome, ErrorCode, HostCall, Policy, PolicySettings, ShellError,
};
use quirl_lua_protocol::{ErrorKind, frame_payload};
use rustix::event::{PollFd, PollFlags, poll};
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions, kill_process_group, waitid};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The defects, one per rule the parent suite pins (SPEC §19.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mutation {
    /// An oversized frame reported as a resource limit (exit 3), not a violation (§11.3).
    ResourceLimitViolationAsLimit,
    /// The worker's exit noticed only by the end of its stream (§9.5-a).
    ExitSeenByEndOfStreamOnly,
    /// A policy out of range on the wire (§10-a).
    PolicyOutOfRange,
    /// Grants sent that the command line did not give (§19.3-b).
    GrantsInvented,
    /// No grant read as every program (§7.1, §16.1-b).
    NoGrantAllowsEverything,
    /// A frame cut short reported as a crash (`lua`), not `validation` (§11.3).
    TruncationAsCrash,
    /// A failed `initialize` reported as a guest error (exit 1, §19.3-c).
    FailedInitializeAsGuestError,
    /// Host commands get the parent's whole environment (§19.3-d).
    HostInheritsEnvironment,
    /// Host commands run in `/` (§19.3-e).
    HostRunsInRoot,
    /// A denied grant answered `invalid_command` (§19.3-g).
    DeniedGrantAsInvalidCommand,
    /// The grant checked before the command's form (§19.3-h).
    GrantCheckedBeforeForm,
    /// `process.spawn:NAME` compared with the program word's file name (§19.3-i).
    GrantMatchesFileName,
    /// `$` expansions and globs passed on as literal text (§19.3-j).
    ExpansionsTakenLiterally,
    /// A startup timeout of 12 s (§10-c: at most 10 s).
    SlowStartup,
    /// The worker started with the parent's environment (§3.1-f).
    WorkerInheritsEnvironment,
    /// The worker inherits a fourth descriptor (§3.1-g).
    WorkerInheritsADescriptor,
    /// Bytes after the final response judged, failing the session (§9.5-b).
    BytesAfterFinalResponseJudged,
    /// Host commands read the parent's stdin (§16.1-e).
    HostInheritsStdin,
}

impl Mutation {
    const ALL: [(&'static str, Mutation); 18] = [
        (
            "resource-limit-violation-as-limit",
            Self::ResourceLimitViolationAsLimit,
        ),
        (
            "exit-seen-by-end-of-stream-only",
            Self::ExitSeenByEndOfStreamOnly,
        ),
        ("policy-out-of-range", Self::PolicyOutOfRange),
        ("grants-invented", Self::GrantsInvented),
        ("no-grant-allows-everything", Self::NoGrantAllowsEverything),
        ("truncation-as-crash", Self::TruncationAsCrash),
        (
            "failed-initialize-as-guest-error",
            Self::FailedInitializeAsGuestError,
        ),
        ("host-inherits-environment", Self::HostInheritsEnvironment),
        ("host-runs-in-root", Self::HostRunsInRoot),
        (
            "denied-grant-as-invalid-command",
            Self::DeniedGrantAsInvalidCommand,
        ),
        ("grant-checked-before-form", Self::GrantCheckedBeforeForm),
        ("grant-matches-file-name", Self::GrantMatchesFileName),
        ("expansions-taken-literally", Self::ExpansionsTakenLiterally),
        ("slow-startup", Self::SlowStartup),
        (
            "worker-inherits-environment",
            Self::WorkerInheritsEnvironment,
        ),
        (
            "worker-inherits-a-descriptor",
            Self::WorkerInheritsADescriptor,
        ),
        (
            "bytes-after-final-response-judged",
            Self::BytesAfterFinalResponseJudged,
        ),
        ("host-inherits-stdin", Self::HostInheritsStdin),
    ];
}

/// The command line of SPEC §19.3.
#[derive(Debug, Default)]
struct Args {
    mutation: Option<Mutation>,
    wall_time_ms: u64,
    allow_process: bool,
    grants: Vec<String>,
    source: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args::default();
    let mut words = std::env::args().skip(1);
    while let Some(word) = words.next() {
        match word.as_str() {
            "--break" => {
                let name = words.next().ok_or("--break needs a mutation")?;
                let found = Mutation::ALL.iter().find(|(known, _)| *known == name);
                args.mutation = Some(found.ok_or(format!("unknown mutation {name}"))?.1);
            }
            "--wall-time-ms" => {
                let value = words.next().ok_or("--wall-time-ms needs a value")?;
                args.wall_time_ms = value
                    .parse()
                    .map_err(|_| format!("bad wall time {value}"))?;
            }
            "--allow-process" => args.allow_process = true,
            "--grant" => args
                .grants
                .push(words.next().ok_or("--grant needs a value")?),
            "eval" => {
                args.source = words.next().ok_or("eval needs a source")?;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// How the run ended: the exit class of §19.3 and the v1 code it names.
struct Failure {
    exit: u8,
    code: ErrorCode,
    message: String,
}

impl Failure {
    fn new(exit: u8, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            exit,
            code,
            message: message.into(),
        }
    }
}

/// Mark every descriptor this process inherited (beyond 0, 1 and 2)
/// close-on-exec, so that no child — the worker, a host command — inherits
/// it (SPEC §3.1-g). Rust's `Command` does that for the descriptors it
/// opens itself, not for inherited ones.
fn close_inherited_descriptors() {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let listed: Vec<i32> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in listed {
        // SAFETY: `fd` was listed as open in /proc/self/fd a moment ago and
        // this program opens and closes nothing else in between (no other
        // thread exists yet); the borrow only sets its close-on-exec flag
        // and ends here. The one descriptor the listing itself used is
        // closed by then, and setting a flag on it fails harmlessly (EBADF).
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let _ = rustix::io::fcntl_setfd(borrowed, rustix::io::FdFlags::CLOEXEC);
    }
}

fn main() -> ExitCode {
    close_inherited_descriptors();
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("usage: {message}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(value) => {
            println!("{value}");
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("error[{}]: {}", failure.code, failure.message);
            ExitCode::from(failure.exit)
        }
    }
}

fn broken(args: &Args, mutation: Mutation) -> bool {
    args.mutation == Some(mutation)
}

/// One session: start, initialize, eval, end (SPEC §3, §9, §13.2).
fn run(args: &Args) -> Result<serde_json::Value, Failure> {
    let line = std::env::var("QUIRL_LUA_WORKER")
        .map_err(|_| Failure::new(2, ErrorCode::InvalidArgument, "QUIRL_LUA_WORKER is not set"))?;
    let words = split_words(&line, Strictness::Lenient)
        .map_err(|message| Failure::new(2, ErrorCode::InvalidArgument, message))?;
    let (mut child, _kept) = spawn_worker(&words, args).map_err(|error| {
        Failure::new(
            5,
            ErrorCode::Lua,
            format!("cannot start the worker: {error}"),
        )
    })?;
    let (Some(stdin), Some(stderr)) = (child.stdin.take(), child.stderr.take()) else {
        return Err(Failure::new(
            5,
            ErrorCode::Lua,
            "the worker's pipes are missing",
        ));
    };
    let pid = Pid::from_child(&child);
    let watched = stderr.as_fd().try_clone_to_owned();
    let mut client = ParentClient::new(stderr, PatchWriter::new(stdin, args.mutation));
    if !broken(args, Mutation::ExitSeenByEndOfStreamOnly)
        && let Ok(stream) = watched
    {
        client.cancel_on(Cancellation::when(move || worker_gone(pid, &stream)));
    }
    if broken(args, Mutation::SlowStartup) {
        client.set_startup_timeout(Duration::from_secs(12));
    }
    let outcome = session(&mut client, args);
    end_session(client, &mut child, pid);
    outcome
}

/// Whether the worker exited and left nothing more in its stream: then a
/// call waiting for it is cancelled at once, even when a descendant holds
/// the stream open (SPEC §9.5-a). The exit is seen without reaping, so the
/// group kill stays safe (§13.2-b).
fn worker_gone(pid: Pid, stream: &OwnedFd) -> bool {
    let exited = waitid(
        WaitId::Pid(pid),
        WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
    );
    if !matches!(exited, Ok(Some(_))) {
        return false;
    }
    let mut fds = [PollFd::new(stream, PollFlags::IN)];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    !matches!(poll(&mut fds, Some(&zero)), Ok(ready) if ready > 0)
}

fn spawn_worker(words: &[String], args: &Args) -> io::Result<(Child, Option<OwnedFd>)> {
    let (program, rest) = words
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty worker command"))?;
    let mut command = Command::new(program);
    command
        .args(rest)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if !broken(args, Mutation::WorkerInheritsEnvironment) {
        command.env_clear();
    }
    let mut kept = None;
    if broken(args, Mutation::WorkerInheritsADescriptor) {
        // A descriptor without close-on-exec: the worker inherits it.
        let null = std::fs::File::open("/dev/null")?;
        let fd = OwnedFd::from(null);
        rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::empty())?;
        kept = Some(fd);
    }
    Ok((command.spawn()?, kept))
}

type Client = ParentClient<std::process::ChildStderr, PatchWriter>;

fn session(client: &mut Client, args: &Args) -> Result<serde_json::Value, Failure> {
    let policy = Policy::new(PolicySettings {
        allow_process: args.allow_process,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms: args.wall_time_ms,
    })
    .map_err(|error| Failure::new(2, ErrorCode::InvalidArgument, error.to_string()))?;
    let mut initialize = Initialize::new(policy).process_enabled(args.allow_process);
    if !args.grants.is_empty() {
        initialize = initialize.grants(args.grants.iter().cloned());
    }
    match client.call(initialize) {
        Ok(Ok(())) => {}
        Ok(Err(record)) => {
            let exit = if broken(args, Mutation::FailedInitializeAsGuestError) {
                1
            } else {
                4
            };
            return Err(Failure::new(
                exit,
                record.code,
                format!("initialize failed: {}", record.message),
            ));
        }
        Err(error) => return Err(classify(&error, args)),
    }
    let request_deadline = Instant::now() + Duration::from_millis(args.wall_time_ms);
    let host = ProcessHost {
        grants: args.grants.clone(),
        request_deadline,
        mutation: args.mutation,
    };
    match client.call_with_host(Eval::new(args.source.clone()), |call| host.run(call)) {
        Ok(Ok(value)) => {
            if broken(args, Mutation::BytesAfterFinalResponseJudged)
                && !client.connection().is_quiet()
            {
                return Err(Failure::new(
                    4,
                    ErrorCode::Validation,
                    "bytes after the response",
                ));
            }
            Ok(value)
        }
        Ok(Err(record)) => {
            let exit = if record.code == ErrorCode::ResourceLimit {
                3
            } else {
                1
            };
            Err(Failure::new(exit, record.code, record.message))
        }
        Err(error) => Err(classify(&error, args)),
    }
}

/// The class and code of a failed call (SPEC §11.3, §19.3-c).
fn classify(error: &ProtocolError, args: &Args) -> Failure {
    let message = error.to_string();
    match error.kind() {
        // The only cancellation is the worker's exit (§9.5-a): a crash.
        ErrorKind::Cancelled | ErrorKind::UnexpectedEnd | ErrorKind::IoError => {
            Failure::new(4, ErrorCode::Lua, message)
        }
        ErrorKind::DeadlinePassed => Failure::new(3, ErrorCode::ResourceLimit, message),
        ErrorKind::WorkerRetired => Failure::new(5, ErrorCode::Lua, message),
        ErrorKind::OversizedFrame if broken(args, Mutation::ResourceLimitViolationAsLimit) => {
            Failure::new(3, ErrorCode::ResourceLimit, message)
        }
        ErrorKind::OversizedFrame => Failure::new(4, ErrorCode::ResourceLimit, message),
        ErrorKind::TruncatedHeader | ErrorKind::TruncatedFrame
            if broken(args, Mutation::TruncationAsCrash) =>
        {
            Failure::new(4, ErrorCode::Lua, message)
        }
        _ => Failure::new(4, ErrorCode::Validation, message),
    }
}

/// SPEC §13.2 (or §3.3 after a clean session): close the worker's stdin,
/// give a worker that is not to be killed a moment to exit, kill its whole
/// group while it is unreaped, reap it, and drain its stream.
fn end_session(client: Client, child: &mut Child, pid: Pid) {
    let must_kill = client.connection().must_kill();
    let (_, mut stderr, writer) = client.into_parts();
    drop(writer);
    if !must_kill {
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until && !exited(pid) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    // The group also holds any descendant (§3.1-d); the unreaped worker
    // keeps its id from being reused (§13.2-b).
    let _ = kill_process_group(pid, Signal::KILL);
    let _ = child.wait();
    let mut sink = [0_u8; 4096];
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let mut fds = [PollFd::new(&stderr, PollFlags::IN)];
        let timeout = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 50_000_000,
        };
        if !matches!(poll(&mut fds, Some(&timeout)), Ok(ready) if ready > 0) {
            continue;
        }
        match stderr.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

fn exited(pid: Pid) -> bool {
    matches!(
        waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
        ),
        Ok(Some(_))
    )
}

/// The worker's stdin, with a mutation's edit of the first frame (the
/// `initialize` request) — a defect the protocol crate itself cannot make.
struct PatchWriter {
    inner: ChildStdin,
    mutation: Option<Mutation>,
    first: Option<Vec<u8>>,
}

impl PatchWriter {
    fn new(inner: ChildStdin, mutation: Option<Mutation>) -> Self {
        let patches = matches!(
            mutation,
            Some(Mutation::PolicyOutOfRange | Mutation::GrantsInvented)
        );
        Self {
            inner,
            mutation,
            first: patches.then(Vec::new),
        }
    }
}

impl Write for PatchWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let Some(first) = self.first.as_mut() else {
            return self.inner.write(bytes);
        };
        first.extend_from_slice(bytes);
        let Some(length) = first
            .get(..4)
            .map(|h| u32::from_be_bytes([h[0], h[1], h[2], h[3]]))
        else {
            return Ok(bytes.len());
        };
        let end = 4 + length as usize;
        if first.len() < end {
            return Ok(bytes.len());
        }
        let rest = first.split_off(end);
        let mut payload = String::from_utf8_lossy(&first[4..]).into_owned();
        match self.mutation {
            Some(Mutation::PolicyOutOfRange) => {
                let start = payload.find("\"memory_limit_bytes\":").map(|at| at + 21);
                if let Some(start) = start {
                    let end = payload[start..]
                        .find(|c: char| !c.is_ascii_digit())
                        .map_or(payload.len(), |n| start + n);
                    payload.replace_range(start..end, "0");
                }
            }
            Some(Mutation::GrantsInvented) => {
                payload = payload.replace("\"grants\":null", "\"grants\":[\"process.spawn\"]");
            }
            _ => {}
        }
        self.first = None;
        let framed = frame_payload(payload.as_bytes()).map_err(io::Error::other)?;
        self.inner.write_all(&framed)?;
        self.inner.write_all(&rest)?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The process host (SPEC §16.1, §19.3-d…j).
struct ProcessHost {
    grants: Vec<String>,
    request_deadline: Instant,
    mutation: Option<Mutation>,
}

fn refused(code: ErrorCode, message: impl Into<String>) -> ShellError {
    ShellError::new(code, message)
}

impl ProcessHost {
    fn broken(&self, mutation: Mutation) -> bool {
        self.mutation == Some(mutation)
    }

    /// Checks in the order of §19.3-h, then the run.
    fn run(&self, call: &HostCall) -> Result<CommandOutcome, ShellError> {
        let strictness = if self.broken(Mutation::ExpansionsTakenLiterally) {
            Strictness::Literal
        } else {
            Strictness::Shell
        };
        if self.broken(Mutation::GrantCheckedBeforeForm) {
            let first = call.command.split_whitespace().next().unwrap_or("");
            self.check_grant(first)?;
        }
        let words = split_words(&call.command, strictness)
            .map_err(|message| refused(ErrorCode::InvalidArgument, message))?;
        check_first_word(&words)?;
        self.check_grant(&words[0])?;
        let program = find_program(&words[0])?;
        let now = Instant::now();
        let deadline = (now + Duration::from_millis(call.deadline_ms)).min(self.request_deadline);
        if deadline <= now {
            return Err(refused(
                ErrorCode::ResourceLimit,
                "command exceeded its deadline",
            ));
        }
        self.execute(&program, &words, deadline, call.max_output_bytes)
    }

    fn check_grant(&self, word: &str) -> Result<(), ShellError> {
        let compared = if self.broken(Mutation::GrantMatchesFileName) {
            Path::new(word)
                .file_name()
                .map_or(word.to_owned(), |name| name.to_string_lossy().into_owned())
        } else {
            word.to_owned()
        };
        let granted = self.grants.iter().any(|grant| {
            grant == "process.spawn" || grant.strip_prefix("process.spawn:") == Some(&compared)
        }) || (self.grants.is_empty()
            && self.broken(Mutation::NoGrantAllowsEverything));
        if granted {
            return Ok(());
        }
        let code = if self.broken(Mutation::DeniedGrantAsInvalidCommand) {
            ErrorCode::InvalidCommand
        } else {
            ErrorCode::Validation
        };
        Err(refused(
            code,
            format!("capability denied: process.spawn:{word}"),
        ))
    }

    fn execute(
        &self,
        program: &Path,
        words: &[String],
        deadline: Instant,
        max_output_bytes: u64,
    ) -> Result<CommandOutcome, ShellError> {
        let mut command = Command::new(program);
        command
            .arg0(&words[0])
            .args(&words[1..])
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // HOME and TMPDIR of the command's own (SPEC §19.3-d), removed
        // when this function returns, after the command was reaped.
        let private = PrivateDirs::new().map_err(|error| {
            refused(
                ErrorCode::ProcessSpawn,
                format!("could not make the command's directories: {error}"),
            )
        })?;
        if !self.broken(Mutation::HostInheritsEnvironment) {
            command.env_clear();
            if let Some(value) = std::env::var_os("PATH") {
                command.env("PATH", value);
            }
            command.env("HOME", private.home());
            command.env("TMPDIR", private.tmp());
        }
        if self.broken(Mutation::HostRunsInRoot) {
            command.current_dir("/");
        }
        command.stdin(if self.broken(Mutation::HostInheritsStdin) {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
        let mut child = command.spawn().map_err(|error| {
            refused(
                ErrorCode::ProcessSpawn,
                format!("could not start {}: {error}", words[0]),
            )
        })?;
        let cap = usize::try_from(max_output_bytes)
            .unwrap_or(usize::MAX)
            .saturating_add(1);
        let stdout = child.stdout.take().map(|pipe| capture(pipe, cap));
        let stderr = child.stderr.take().map(|pipe| capture(pipe, cap));
        let pid = Pid::from_child(&child);
        let status = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break Some(status);
            }
            if Instant::now() >= deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        // Nothing the command started outlives the call (§16.1-j).
        let _ = kill_process_group(pid, Signal::KILL);
        let status = match status {
            Some(status) => status,
            None => {
                let _ = child.wait();
                return Err(refused(
                    ErrorCode::ResourceLimit,
                    "command exceeded its deadline",
                ));
            }
        };
        let text = |captured: Option<std::thread::JoinHandle<Vec<u8>>>| {
            captured
                .and_then(|handle| handle.join().ok())
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        };
        let code = status
            .code()
            .or_else(|| status.signal().map(|signal| 128 + signal))
            .unwrap_or(-1);
        // Output beyond the cap makes the client answer `resource_limit`
        // (`host_response_or_error`, §16.1-g).
        Ok(CommandOutcome {
            status: code,
            stdout: text(stdout),
            stderr: text(stderr),
        })
    }
}

/// Read a stream to its end, keeping at most `cap` bytes (the rest is read
/// and dropped, so the command never blocks on a full pipe).
fn capture(mut pipe: impl Read + Send + 'static, cap: usize) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut chunk = [0_u8; 8192];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) | Err(_) => return kept,
                Ok(read) => {
                    let room = cap.saturating_sub(kept.len());
                    kept.extend_from_slice(&chunk[..read.min(room)]);
                }
            }
        }
    })
}

/// A bare program word is looked up in `PATH` (§19.3-f); one with `/` is
/// run as written.
fn find_program(word: &str) -> Result<PathBuf, ShellError> {
    if word.contains('/') {
        return Ok(PathBuf::from(word));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(word))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|meta| {
                meta.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0
            })
        })
        .ok_or_else(|| {
            refused(
                ErrorCode::ProcessSpawn,
                format!("program {word} was not found on PATH"),
            )
        })
}

/// The first word may not be an assignment, a job-control command or a
/// shell built-in (§19.3-j).
fn check_first_word(words: &[String]) -> Result<(), ShellError> {
    const SHELL_ONLY: &[&str] = &[
        "fg", "bg", "jobs", "disown", "wait", "suspend", ".", "alias", "break", "cd", "continue",
        "eval", "exec", "exit", "export", "local", "readonly", "return", "set", "shift", "source",
        "trap", "ulimit", "umask", "unalias", "unset",
    ];
    let Some(first) = words.first().filter(|word| !word.is_empty()) else {
        return Err(refused(ErrorCode::InvalidArgument, "the command is empty"));
    };
    let name = Path::new(first)
        .file_name()
        .map_or(first.to_owned(), |name| name.to_string_lossy().into_owned());
    if SHELL_ONLY.contains(&name.as_str()) {
        return Err(refused(
            ErrorCode::InvalidArgument,
            format!("`{first}` needs a shell"),
        ));
    }
    Ok(())
}

/// How strictly a command line is split.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strictness {
    /// The worker command (§19.3): quotes and backslashes, nothing refused.
    Lenient,
    /// A host call's command (§16.1-d, §19.3-j): every construct a shell
    /// would read otherwise is refused.
    Shell,
    /// The mutation: expansions and globs kept as literal text.
    Literal,
}

/// Split `text` into words as a POSIX shell does (single and double quotes,
/// backslashes), refusing what `strictness` says.
fn split_words(text: &str, strictness: Strictness) -> Result<Vec<String>, String> {
    let strict = strictness != Strictness::Lenient;
    let expansions_refused = strictness == Strictness::Shell;
    if text.contains('\0') {
        return Err("the command holds a NUL byte".to_owned());
    }
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(inner) => word.push(inner),
                        None => return Err("an unterminated single quote".to_owned()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(escaped @ ('\\' | '"' | '$' | '`')) => word.push(escaped),
                            Some('\n') => {}
                            Some(other) => {
                                word.push('\\');
                                word.push(other);
                            }
                            None => return Err("an unterminated double quote".to_owned()),
                        },
                        Some(inner @ ('$' | '`')) if expansions_refused => {
                            return Err(format!("`{inner}` (an expansion) inside double quotes"));
                        }
                        Some(inner) => word.push(inner),
                        None => return Err("an unterminated double quote".to_owned()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(escaped) => {
                    in_word = true;
                    word.push(escaped);
                }
                None => return Err("a final lone backslash".to_owned()),
            },
            '\n' if strict => return Err("a newline (a second command)".to_owned()),
            c if strict && c.is_control() => return Err("a control character".to_owned()),
            '&' | ';' | '|' | '<' | '>' | '(' | ')' if strict => {
                return Err(format!("`{c}` (a shell operator)"));
            }
            '$' | '`' | '*' | '?' | '[' if expansions_refused => {
                return Err(format!("`{c}` (an expansion or a glob)"));
            }
            '~' | '#' if strict && !in_word => {
                return Err(format!("`{c}` at the start of a word"));
            }
            '=' if strict && words.is_empty() && !word.is_empty() && in_word => {
                return Err("a variable assignment".to_owned());
            }
            other => {
                in_word = true;
                word.push(other);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// A command's own `HOME` and `TMPDIR` (SPEC §19.3-d): two empty
/// directories under one fresh directory of the system's temporary
/// directory, removed with everything in them on drop. Hand-written: the
/// conformance crate depends on nothing for temporary files.
struct PrivateDirs {
    root: PathBuf,
}

impl PrivateDirs {
    fn new() -> std::io::Result<Self> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let root = std::env::temp_dir().join(format!(
            "mutant-parent-command-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&root)?;
        let dirs = PrivateDirs { root };
        std::fs::create_dir(dirs.home())?;
        std::fs::create_dir(dirs.tmp())?;
        Ok(dirs)
    }

    fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }
}

impl Drop for PrivateDirs {
    fn drop(&mut self) {
        // Best effort: a leftover directory under the temporary directory
        // is all a failure here leaves.
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
