//! Run one parsed, authorized command: spawn, capture, wait, kill, reap.
//!
//! Everything happens on the calling thread: one wait (the crate's waiting
//! helper, `poll`) over the two output pipes, a pidfd for the leader's exit
//! and the cancellation wake descriptor, with the deadline as its timeout
//! (DESIGN §16.6). No thread is started, and every descriptor and process is
//! owned by a value that closes, kills or reaps it on drop. The child's side
//! of the spawn is the `exec_image` module.

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::ErrorCode;

use super::cancel::CancelSignal;
use super::command_language::parse_command;
use super::exec_image::ExecImage;
use super::exec_ruleset::{ExecRuleset, landlock_support};
use super::grants::{GrantRule, ProcessHostConfig};
use super::host_error::HostError;
use super::tree::OwnedTree;
use crate::cgroup::{self, CgroupLimits, ChildCgroup, ChildKind};
use crate::child_process::poll::{self, PollFlags, set_nonblocking};
use crate::child_process::signals::{children_are_auto_reaped, signal_name};

/// Host maximum for retained bytes per output stream (the v1 host-call
/// bound on `max_output_bytes`).
pub const OUTPUT_BYTES_MAX: usize = 1_048_576;

/// Largest JSON-encoded size of `stdout` plus `stderr` in one outcome, so the
/// host response always fits a v1 frame (5,242,880 bytes) with room for the
/// envelope.
pub const OUTCOME_ENCODED_BYTES_MAX: usize = 5_242_880 - 4_096;

/// Bytes read from a pipe at a time.
const DRAIN_CHUNK_BYTES: usize = 64 * 1024;
/// Reads per readiness event before the deadline is checked again.
const DRAIN_READS_MAX: usize = 16;

/// Fallback tick when the kernel has no pidfds (Linux before 5.3) or the
/// cancellation token has no wake descriptor.
const FALLBACK_TICK: Duration = Duration::from_millis(10);

/// One command to run on behalf of the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessRequest {
    /// Command source in the command language of [`super::parse_command`].
    pub command: String,
    /// Absolute deadline: when it passes, the tree is killed and the call
    /// fails with `resource_limit`.
    pub deadline: Instant,
    /// Bytes retained per stream; values above [`OUTPUT_BYTES_MAX`] are
    /// lowered to it.
    pub max_output_bytes: usize,
}

/// What a command that ran to completion produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutcomeData {
    /// Exit code, or 128 + N when the program was ended by signal N.
    pub status: i32,
    /// The signal that ended the program, when it did not exit.
    pub signal: Option<i32>,
    /// Standard output, decoded as UTF-8 with invalid sequences replaced by
    /// U+FFFD.
    pub stdout: String,
    /// Standard error, decoded like `stdout`.
    pub stderr: String,
    /// Whether `stdout` contained invalid UTF-8 that was replaced.
    pub stdout_lossy: bool,
    /// Whether `stderr` contained invalid UTF-8 that was replaced.
    pub stderr_lossy: bool,
}

impl CommandOutcomeData {
    /// The conventional name of [`Self::signal`] (`SIGKILL`, …).
    pub fn signal_name(&self) -> Option<&'static str> {
        self.signal
            .map(|signal| signal_name(signal).unwrap_or("real-time signal"))
    }
}

/// Check, parse, authorize and run `request`.
///
/// Order: access (`validation`), command language (`invalid_argument`),
/// program grant (`validation`), program lookup (`process_spawn`), deadline
/// and cancellation (`resource_limit`), then the run itself.
pub fn run_command(
    config: &ProcessHostConfig,
    request: &ProcessRequest,
    cancel: &(impl CancelSignal + ?Sized),
) -> Result<CommandOutcomeData, HostError> {
    config.check_access()?;
    let argv = parse_command(&request.command)?;
    let program = argv.first().map(String::as_str).unwrap_or_default();
    let path = config.authorize(program)?;
    let limit = request.max_output_bytes.min(OUTPUT_BYTES_MAX);
    let started = Instant::now();
    if cancel.is_cancelled() {
        return Err(cancelled_error(started, false));
    }
    if started >= request.deadline {
        return Err(deadline_error(started, false)
            .with_context("the deadline had passed before the command started"));
    }
    ensure_children_are_not_auto_reaped()?;
    let ruleset = exec_ruleset(config, program, &path)?;
    let cgroup = command_cgroup(config)?;
    let image = ExecImage::new(
        &path,
        &argv,
        config,
        cgroup.as_ref().map(ChildCgroup::procs_fd),
        ruleset.as_deref().map(ExecRuleset::raw_fd),
    )?;
    let mut command = Command::new(&path);
    command
        .current_dir(config.cwd())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the forked child before exec and only
    // makes async-signal-safe system calls on data prepared before the fork
    // (see `ExecImage::exec`).
    unsafe {
        command.pre_exec(move || image.exec());
    }
    // Adopting orphans: no sweep may take the new leader for one before it
    // is registered (DESIGN §16.7).
    let guard = super::orphans::spawn_guard();
    let child = command
        .spawn()
        .map_err(|error| spawn_error(program, &error, ruleset.as_deref()))?;
    let mut tree = OwnedTree::new(child, cgroup);
    drop(guard);
    // The child has its own copy (and has exec'd); ours can go (a cached
    // one stays with the configuration).
    drop(ruleset);
    let mut stdout = Capture::new(
        tree.child_mut()
            .stdout
            .take()
            .map(|pipe| std::fs::File::from(OwnedFd::from(pipe))),
        limit,
    )?;
    let mut stderr = Capture::new(
        tree.child_mut()
            .stderr
            .take()
            .map(|pipe| std::fs::File::from(OwnedFd::from(pipe))),
        limit,
    )?;

    capture_until_exit(
        &mut tree,
        &mut stdout,
        &mut stderr,
        request,
        cancel,
        started,
    )?;
    finish(tree, stdout, stderr, limit)
}

/// Capture both streams until the leader exited and both are closed, or
/// kill the tree at the deadline or on cancellation (DESIGN §16.6).
fn capture_until_exit(
    tree: &mut OwnedTree,
    stdout: &mut Capture,
    stderr: &mut Capture,
    request: &ProcessRequest,
    cancel: &(impl CancelSignal + ?Sized),
    started: Instant,
) -> Result<(), HostError> {
    let limit = stdout.limit;
    let mut leader_exited = false;
    loop {
        if cancel.is_cancelled() {
            let _ = tree.kill_and_reap();
            return Err(with_containment_notes(
                with_overflow_note(cancelled_error(started, true), stdout, stderr, limit),
                tree,
            ));
        }
        let now = Instant::now();
        if now >= request.deadline {
            let _ = tree.kill_and_reap();
            return Err(with_containment_notes(
                with_overflow_note(deadline_error(started, true), stdout, stderr, limit),
                tree,
            ));
        }
        if !leader_exited && tree.exit_fd().is_none() {
            leader_exited = tree
                .leader_exited()
                .map_err(|error| HostError::io("could not observe the child", &error))?;
            if leader_exited {
                tree.kill_after_exit();
            }
        }
        if leader_exited && stdout.is_closed() && stderr.is_closed() {
            return Ok(());
        }
        let exit = if leader_exited { None } else { tree.exit_fd() };
        let wake = cancel.wake_fd();
        let mut until = request.deadline;
        if wake.is_none() || (!leader_exited && exit.is_none()) {
            until = until.min(now + FALLBACK_TICK);
        }
        let ready = wait_for_events([stdout.fd(), stderr.fd(), exit, wake], until)
            .map_err(|error| HostError::io("could not wait for the child", &error))?;
        if ready[0] {
            stdout.drain().map_err(|error| {
                HostError::io("could not read the child's standard output", &error)
            })?;
        }
        if ready[1] {
            stderr.drain().map_err(|error| {
                HostError::io("could not read the child's standard error", &error)
            })?;
        }
        if ready[2] {
            leader_exited = true;
            // The leader is a zombie now: its PID still pins the group and
            // session, so the rest of the tree is killed before the reap.
            tree.kill_after_exit();
        }
    }
}

/// One wait over the present descriptors of `slots` (each for readability)
/// until `until`; which of them fired.
fn wait_for_events(slots: [Option<BorrowedFd<'_>>; 4], until: Instant) -> io::Result<[bool; 4]> {
    let mut fds = Vec::with_capacity(slots.len());
    let mut index = [None; 4];
    for (slot, fd) in index.iter_mut().zip(slots) {
        if let Some(fd) = fd {
            *slot = Some(fds.len());
            fds.push(poll::interest(fd, PollFlags::IN));
        }
    }
    poll::wait_until(&mut fds, until)?;
    Ok(index.map(|slot| slot.is_some_and(|at| !fds[at].revents().is_empty())))
}

/// Reap the leader and turn what the command left into its outcome or the
/// error that replaces it (escapes, cleanup problems, overflow, size).
fn finish(
    mut tree: OwnedTree,
    stdout: Capture,
    stderr: Capture,
    limit: usize,
) -> Result<CommandOutcomeData, HostError> {
    let status = tree
        .kill_and_reap()
        .map_err(|error| HostError::io("could not reap the child", &error))?;
    let (status, signal) = encode_status(status);
    if !tree.escaped().is_empty() {
        return Err(with_containment_notes(
            HostError::new(
                ErrorCode::ResourceLimit,
                "command left processes running outside its session",
            )
            .with_context(status_note(status, signal))
            .with_help("Run the program in the foreground; a command may not leave daemons behind")
            .with_exit_status(Some(status)),
            &tree,
        ));
    }
    if !tree.problems().is_empty() {
        return Err(with_containment_notes(
            HostError::new(
                ErrorCode::Io,
                "command ran, but its cgroup could not be cleaned up",
            )
            .with_context(status_note(status, signal))
            .with_exit_status(Some(status)),
            &tree,
        ));
    }
    if stdout.overflowed() || stderr.overflowed() {
        return Err(HostError::new(
            ErrorCode::ResourceLimit,
            format!("command output exceeded its limit of {limit} bytes per stream"),
        )
        .with_context(overflow_note(&stdout, &stderr, limit))
        .with_context(status_note(status, signal))
        .with_help(
            "Reduce the output, write it to a file, or raise max_output_bytes (at most 1048576)",
        )
        .with_exit_status(Some(status)));
    }
    let (stdout, stdout_lossy) = stdout.into_text();
    let (stderr, stderr_lossy) = stderr.into_text();
    let encoded = json_string_len(&stdout).saturating_add(json_string_len(&stderr));
    if encoded > OUTCOME_ENCODED_BYTES_MAX {
        return Err(HostError::new(
            ErrorCode::ResourceLimit,
            "command output does not fit in one host response frame",
        )
        .with_context(format!(
            "encoded output {encoded} bytes; limit {OUTCOME_ENCODED_BYTES_MAX} bytes"
        ))
        .with_context(status_note(status, signal))
        .with_help("Control characters and invalid UTF-8 grow when encoded; reduce the output or lower max_output_bytes")
        .with_exit_status(Some(status)));
    }
    Ok(CommandOutcomeData {
        status,
        signal,
        stdout,
        stderr,
        stdout_lossy,
        stderr_lossy,
    })
}

/// The Landlock execute ruleset of the command (DESIGN §16.6), or `None`
/// when every program is granted or Landlock is unavailable (then the
/// grant was checked against the program list, DESIGN §16.2). Fails closed:
/// where Landlock is available but the ruleset cannot be built, where it is
/// required (`require_landlock`) but unavailable, and where a grant was
/// accepted under the Landlock rule but the ruleset is not in force.
fn exec_ruleset(
    config: &ProcessHostConfig,
    program: &str,
    path: &std::path::Path,
) -> Result<Option<Arc<ExecRuleset>>, HostError> {
    let support = landlock_support();
    let shown = super::grants::truncate_for_display(program);
    if !support.available() {
        if config.landlock_required() {
            return Err(HostError::new(
                ErrorCode::ProcessSpawn,
                format!("could not start `{shown}`: Landlock is required but unavailable"),
            )
            .with_context(format!("landlock: {}", support.summary()))
            .with_help("Run on Linux 5.13 or later with Landlock enabled (lsm=landlock), or drop --require-landlock"));
        }
        if !config.grants().any_program() {
            super::grants::refuse_command_runner(GrantRule::ProgramList, program)?;
        }
        return Ok(None);
    }
    if config.grants().any_program() {
        return Ok(None);
    }
    config
        .rulesets()
        .for_program(path, config.cwd())
        .map(Some)
        .map_err(|why| {
            HostError::new(
                ErrorCode::ProcessSpawn,
                format!(
                    "could not start `{shown}`: its Landlock execute ruleset could not be built"
                ),
            )
            .with_context(why)
            .with_context(format!("landlock: {}", support.summary()))
            .with_help("Check that the program and the interpreter it names exist and are readable")
        })
}

/// The Landlock state of a command, as an error context line.
fn landlock_note(ruleset: Option<&ExecRuleset>) -> String {
    match ruleset {
        Some(ruleset) => format!(
            "landlock: executable files: {}",
            ruleset
                .files()
                .iter()
                .map(|file| file.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => format!("landlock: not applied; {}", landlock_support().summary()),
    }
}

/// The command's cgroup (DESIGN §17.2), in cgroup mode.
fn command_cgroup(config: &ProcessHostConfig) -> Result<Option<ChildCgroup>, HostError> {
    let failed = |why: String| {
        HostError::new(ErrorCode::Io, "could not contain the command in a cgroup")
            .with_context(why)
            .with_help("Use process-group containment where cgroup v2 is not writable")
    };
    let Some(hierarchy) = cgroup::resolve(config.configured_containment()).map_err(failed)? else {
        return Ok(None);
    };
    let limits = CgroupLimits {
        memory_max: None,
        pids_max: config.configured_command_pids_max(),
    };
    ChildCgroup::create(hierarchy, ChildKind::Command, limits)
        .map(Some)
        .map_err(|error| failed(format!("creating the command's cgroup failed: {error}")))
}

/// Escapes the cgroup caught, and cgroup cleanup problems, as context.
fn with_containment_notes(error: HostError, tree: &OwnedTree) -> HostError {
    let mut error = error;
    let escaped = tree.escaped();
    if !escaped.is_empty() {
        let shown: Vec<String> = escaped.iter().take(8).map(u32::to_string).collect();
        error = error.with_context(format!(
            "escape contained: {} process(es) of the command had left its session (pid {}{}); the command's cgroup still held them and cgroup.kill ended them",
            escaped.len(),
            shown.join(", "),
            if escaped.len() > shown.len() { ", …" } else { "" }
        ));
    }
    for problem in tree.problems() {
        error = error.with_context(format!("cleanup: {problem}"));
    }
    if tree.in_cgroup() {
        error = error.with_context("containment: cgroup v2 (one cgroup per command)");
    }
    error
}

/// One captured stream: keeps up to `limit` bytes and counts the rest.
struct Capture {
    file: Option<std::fs::File>,
    retained: Vec<u8>,
    discarded: u64,
    limit: usize,
}

impl Capture {
    fn new(file: Option<std::fs::File>, limit: usize) -> Result<Self, HostError> {
        if let Some(file) = &file {
            set_nonblocking(file.as_fd())
                .map_err(|error| HostError::io("could not configure an output pipe", &error))?;
        }
        Ok(Self {
            file,
            retained: Vec::new(),
            discarded: 0,
            limit,
        })
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.file.as_ref().map(AsFd::as_fd)
    }

    fn is_closed(&self) -> bool {
        self.file.is_none()
    }

    fn overflowed(&self) -> bool {
        self.discarded > 0
    }

    /// Read until the pipe is empty or closed, or [`DRAIN_READS_MAX`] reads
    /// were made (so a writer faster than this reader cannot keep the host
    /// from its deadline). Excess bytes are discarded so the child never
    /// blocks on a full pipe.
    fn drain(&mut self) -> io::Result<()> {
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        let mut chunk = [0_u8; DRAIN_CHUNK_BYTES];
        for _ in 0..DRAIN_READS_MAX {
            match file.read(&mut chunk) {
                Ok(0) => {
                    self.file = None;
                    return Ok(());
                }
                Ok(count) => {
                    let room = self.limit - self.retained.len();
                    let kept = count.min(room);
                    self.retained.extend_from_slice(&chunk[..kept]);
                    self.discarded = self.discarded.saturating_add((count - kept) as u64);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    fn into_text(self) -> (String, bool) {
        match String::from_utf8(self.retained) {
            Ok(text) => (text, false),
            Err(error) => (String::from_utf8_lossy(error.as_bytes()).into_owned(), true),
        }
    }
}

/// `error` with the [`overflow_note`] appended when either stream passed
/// its limit before the command was killed.
fn with_overflow_note(
    error: HostError,
    stdout: &Capture,
    stderr: &Capture,
    limit: usize,
) -> HostError {
    if stdout.overflowed() || stderr.overflowed() {
        error.with_context(overflow_note(stdout, stderr, limit))
    } else {
        error
    }
}

fn overflow_note(stdout: &Capture, stderr: &Capture, limit: usize) -> String {
    format!(
        "limit {limit} bytes per stream; stdout retained {} and discarded {} bytes; \
         stderr retained {} and discarded {} bytes",
        stdout.retained.len(),
        stdout.discarded,
        stderr.retained.len(),
        stderr.discarded
    )
}

/// Refuse to run when SIGCHLD is ignored: the kernel would then reap the
/// leader itself, releasing its PID while the group may still be signalled.
fn ensure_children_are_not_auto_reaped() -> Result<(), HostError> {
    let auto_reaped = children_are_auto_reaped()
        .map_err(|error| HostError::io("could not query the SIGCHLD disposition", &error))?;
    if auto_reaped {
        return Err(HostError::new(
            ErrorCode::Io,
            "SIGCHLD is ignored in the parent, so children cannot be reaped safely",
        )
        .with_help("Do not ignore SIGCHLD or set SA_NOCLDWAIT in a process that hosts commands"));
    }
    Ok(())
}

fn spawn_error(program: &str, error: &io::Error, ruleset: Option<&ExecRuleset>) -> HostError {
    HostError::new(
        ErrorCode::ProcessSpawn,
        format!(
            "could not start `{}`",
            super::grants::truncate_for_display(program)
        ),
    )
    .with_context(format!("operating-system error: {error}"))
    .with_context(landlock_note(ruleset))
    .with_help(
        "Check that the program exists, is executable, and that the working directory exists",
    )
}

fn cancelled_error(started: Instant, killed: bool) -> HostError {
    let error = HostError::new(ErrorCode::ResourceLimit, "command was cancelled");
    let error = if killed {
        error.with_context(format!(
            "process tree killed with SIGKILL after {} ms",
            started.elapsed().as_millis()
        ))
    } else {
        error.with_context("cancelled before the command started")
    };
    error.with_help("Retry only after the cancelling request is cleared")
}

fn deadline_error(started: Instant, killed: bool) -> HostError {
    let error = HostError::new(ErrorCode::ResourceLimit, "command exceeded its deadline");
    let error = if killed {
        error.with_context(format!(
            "process tree killed with SIGKILL after {} ms",
            started.elapsed().as_millis()
        ))
    } else {
        error
    };
    error.with_help("Use a shorter-running command or raise the host call or request deadline")
}

fn encode_status(status: ExitStatus) -> (i32, Option<i32>) {
    if let Some(code) = status.code() {
        return (code, None);
    }
    match status.signal() {
        Some(signal) => (128 + signal, Some(signal)),
        // Neither exited nor signalled cannot happen for a reaped child.
        None => (128, None),
    }
}

fn status_note(status: i32, signal: Option<i32>) -> String {
    match signal {
        Some(signal) => format!(
            "terminated by signal {signal} ({}); status {status}",
            signal_name(signal).unwrap_or("real-time signal")
        ),
        None => format!("exit status {status}"),
    }
}

/// Bytes `text` occupies as a JSON string body (without the quotes) in
/// serde_json's compact encoding.
fn json_string_len(text: &str) -> usize {
    text.chars()
        .map(|c| match c {
            '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
            c if u32::from(c) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn json_string_len_matches_serde_json() {
        for text in [
            "",
            "plain",
            "tab\tnewline\n",
            "\u{1}\u{1f}\u{7f}",
            "quote\" back\\",
            "héllo ✓ \u{fffd}",
        ] {
            let encoded = serde_json::to_string(text).unwrap();
            assert_eq!(json_string_len(text), encoded.len() - 2, "{text:?}");
        }
    }

    #[test]
    fn statuses_encode_exit_codes_and_signals() {
        assert_eq!(encode_status(ExitStatus::from_raw(3 << 8)), (3, None));
        assert_eq!(
            encode_status(ExitStatus::from_raw(libc::SIGKILL)),
            (137, Some(9))
        );
    }
}
