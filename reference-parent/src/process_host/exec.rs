//! Run one parsed, authorized command: contain, spawn, capture, wait,
//! kill, reap.
//!
//! Everything happens on the calling thread: one wait (the crate's waiting
//! helper, `poll`) over the two output pipes, a pidfd for the leader's exit,
//! the exec guard's listener and the cancellation wake descriptor, with the
//! deadline as its timeout (DESIGN §16.6). No thread is started, and every
//! descriptor, directory, cgroup and process is owned by a value that
//! closes, removes, kills or reaps it on drop. The child's side of the
//! spawn is the `command_spawn` module; what contains the command is built
//! here, before it: its private directory (`private_dirs`), its Landlock
//! layers (`write_ruleset`, and `exec_ruleset` for a program granted by
//! name), its cgroups, and the exec guard (`exec_guard`).

use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::ErrorCode;

use super::cancel::CancelSignal;
use super::command_language::parse_command;
use super::command_spawn::{self, ChildPlan, Launched, Namespace, ReportChannel, Reported};
use super::exec_guard::{ExecGuard, GuardProgram, exec_guard_support};
use super::exec_image::ExecImage;
use super::exec_ruleset::{ExecRuleset, landlock_support};
use super::grants::{GrantRule, ProcessHostConfig};
use super::host_error::HostError;
use super::private_dirs::{PooledDirs, PrivateDirs, PrivateDirsPool};
use super::tree::OwnedTree;
use super::write_ruleset::WriteRuleset;
use crate::cgroup::{self, CgroupLimits, ChildCgroup, ChildKind, PidsCgroup, PidsEnforcement};
use crate::child_process::child_setup;
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
/// Order (DESIGN §16.3): access (`validation`), command language
/// (`invalid_argument`), program grant (`validation`), program lookup
/// (`process_spawn`), a granted program commands could write and the
/// program's identity (`validation`), cancellation and deadline
/// (`resource_limit`), containment, then the run itself.
pub fn run_command(
    config: &ProcessHostConfig,
    request: &ProcessRequest,
    cancel: &(impl CancelSignal + ?Sized),
) -> Result<CommandOutcomeData, HostError> {
    config.check_access()?;
    let argv = parse_command(&request.command)?;
    let program = argv.first().map(String::as_str).unwrap_or_default();
    let path = config.authorize(program)?;
    let granted_by_name = !config.grants().any_program();
    let ruleset = exec_ruleset(config, program, &path)?;
    let guard = exec_guard(granted_by_name, program)?;
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
    let mut containment = Containment::build(config)?;
    let private = containment
        .dirs()
        .ok_or_else(|| HostError::new(ErrorCode::Io, "the command has no private directory"))?;
    let environment = child_environment(config, private);
    let image = ExecImage::new(
        &path,
        &argv,
        environment
            .iter()
            .map(|(name, value)| (*name, value.as_os_str())),
    )?;
    let cwd = CString::new(config.cwd().as_os_str().as_bytes()).map_err(|_| {
        HostError::new(
            ErrorCode::InvalidArgument,
            "working directory contains a NUL byte",
        )
    })?;
    let mut cgroup_procs: Vec<RawFd> = Vec::with_capacity(2);
    cgroup_procs.extend(containment.cgroup.as_ref().map(ChildCgroup::procs_fd));
    cgroup_procs.extend(containment.pids.as_ref().map(PidsCgroup::procs_fd));
    let mut layers: Vec<RawFd> = Vec::with_capacity(2);
    layers.extend(
        containment
            .private
            .as_mut()
            .filter(|_| landlock_support().available())
            .and_then(|pooled| pooled.writes(&config.writable_roots()).ok())
            .map(WriteRuleset::raw_fd),
    );
    layers.extend(ruleset.as_deref().and_then(ExecRuleset::raw_fd));
    let namespace = command_spawn::namespace_in_effect();
    let id_maps = (namespace == Namespace::UserAndPid).then(command_spawn::IdMaps::of_this_process);
    let plan = ChildPlan {
        image: &image,
        cwd: &cwd,
        cgroup_procs: &cgroup_procs,
        landlock: &layers,
        guard,
        namespace,
        id_maps: id_maps.as_ref(),
        processes_max: containment.processes_max,
        // In its own user namespace the child holds every capability there,
        // `CAP_SETPCAP` included, whatever this process holds.
        bounding_last: if namespace == Namespace::UserAndPid {
            Some(child_setup::last_capability())
        } else {
            child_setup::bounding_set_to_drop()
        },
    };
    // Adopting orphans: no sweep may take the new leader for one before it
    // is registered (DESIGN §16.7).
    let spawn_lock = super::orphans::spawn_guard();
    let files = ruleset.as_deref().map(ExecRuleset::files);
    let launched = command_spawn::launch(&plan)
        .map_err(|error| spawn_error(program, &error, None, &SpawnNotes::of(&plan, files)))?;
    let tree = OwnedTree::new(
        launched.pid,
        containment.cgroup.take(),
        namespace != Namespace::None,
    );
    drop(spawn_lock);
    // The child has copies of its domains' descriptors; ours can go (a
    // cached execute ruleset stays with the configuration).
    let spawn_notes = SpawnNotes::of(&plan, files);
    drop(ruleset);
    let Launched {
        report,
        stdout,
        stderr,
        status: status_pipe,
        ..
    } = launched;
    let mut stdout = Capture::new(Some(std::fs::File::from(stdout)), limit)?;
    let mut stderr = Capture::new(Some(std::fs::File::from(stderr)), limit)?;
    let mut running = Running {
        tree,
        guard: None,
        guarded: guard.is_some(),
        report: ReportChannel::new(report),
        containment,
        status_pipe,
        guard_done: false,
    };
    capture_until_exit(
        &mut running,
        &mut stdout,
        &mut stderr,
        request,
        cancel,
        started,
    )
    .map_err(|error| {
        running
            .spawn_failure(program, &spawn_notes)
            .unwrap_or(error)
    })?;
    finish(
        running,
        stdout,
        stderr,
        limit,
        program,
        &spawn_notes,
        config.private_dirs(),
    )
}

/// What a spawn error says of the command's containment, kept past the
/// spawn (the plan borrows what the start needed).
struct SpawnNotes {
    landlock: String,
    guarded: bool,
}

impl SpawnNotes {
    fn of(plan: &ChildPlan<'_>, files: Option<&[std::path::PathBuf]>) -> Self {
        Self {
            landlock: landlock_note(plan.landlock, files),
            guarded: plan.guard.is_some(),
        }
    }
}

/// What contains one command besides its process tree, all released after
/// it: its private directories (with their write domain, kept by the
/// configuration for its next command), and its cgroups (the v2 one moves
/// into the tree).
struct Containment {
    private: Option<PooledDirs>,
    cgroup: Option<ChildCgroup>,
    pids: Option<PidsCgroup>,
    /// The process limit as `RLIMIT_NPROC` in the command's user namespace.
    processes_max: Option<u64>,
}

impl Containment {
    fn build(config: &ProcessHostConfig) -> Result<Self, HostError> {
        let mut private = config.private_dirs().take().map_err(|error| {
            HostError::io("could not create the command's private directory", &error)
        })?;
        if landlock_support().available() {
            private.writes(&config.writable_roots()).map_err(|why| {
                HostError::new(
                    ErrorCode::ProcessSpawn,
                    "could not confine the command's writes (its Landlock domain)",
                )
                .with_context(why)
                .with_context(format!("landlock: {}", landlock_support().summary()))
                .with_help("Check that the working directory and the writable directories exist")
            })?;
        }
        let (cgroup, pids, processes_max) = command_cgroups(config)?;
        Ok(Self {
            private: Some(private),
            cgroup,
            pids,
            processes_max,
        })
    }

    /// The private directories (present until the command has ended).
    fn dirs(&self) -> Option<&PrivateDirs> {
        self.private.as_ref().map(|pooled| &pooled.dirs)
    }
}

/// The child's environment: the configured entries, and `HOME` and
/// `TMPDIR` in the private directory unless declared (DESIGN §16.5).
fn child_environment<'a>(
    config: &'a ProcessHostConfig,
    private: &PrivateDirs,
) -> Vec<(&'a str, std::ffi::OsString)> {
    let mut entries: Vec<(&str, std::ffi::OsString)> = config
        .environment()
        .iter()
        .map(|(name, value)| (name, value.to_os_string()))
        .collect();
    for (name, dir) in [("HOME", private.home()), ("TMPDIR", private.tmp())] {
        if config.environment().get(name).is_none() {
            entries.push((name, dir.as_os_str().to_os_string()));
        }
    }
    entries.sort_by(|left, right| left.0.cmp(right.0));
    entries
}

/// A started command: its tree, its report channel and exec guard, what
/// else contains it, and (in a PID namespace) the pipe its init sends the
/// program's status on.
struct Running {
    tree: OwnedTree,
    guard: Option<ExecGuard>,
    /// Whether the command runs under the exec guard (its listener may not
    /// have arrived yet).
    guarded: bool,
    report: ReportChannel,
    containment: Containment,
    status_pipe: Option<std::os::fd::OwnedFd>,
    /// No task carries the guard's filter any more.
    guard_done: bool,
}

impl Running {
    /// Answer the guard's pending notification (a refused exec, or one of
    /// a task that is gone). A broken listener is dropped: the kernel then
    /// fails every further exec of the tree with `ENOSYS`.
    fn answer_guard(&mut self) {
        if let Some(guard) = self.guard.as_mut()
            && guard.answer().is_err()
        {
            self.guard = None;
        }
    }

    /// Read the report channel: the exec guard's listener arrives here.
    fn read_report(&mut self) -> io::Result<()> {
        if let Reported::Listener(listener) = self.report.read()? {
            self.guard = Some(ExecGuard::new(listener));
        }
        Ok(())
    }

    /// The spawn error of a command whose program never ran: a step of
    /// the child failed (its report), or a guarded command ended before the
    /// guard let its exec through.
    fn spawn_failure(&self, program: &str, notes: &SpawnNotes) -> Option<HostError> {
        if let Some((step, error)) = self.report.failure() {
            return Some(spawn_error(program, &error, Some(step), notes));
        }
        let started = self.guard.as_ref().is_some_and(ExecGuard::started);
        if self.guarded && !started && self.report.fd().is_none() {
            return Some(spawn_error(
                program,
                &io::Error::other("the child ended before it executed the program"),
                None,
                notes,
            ));
        }
        None
    }

    /// The guard's listener while it still has a task to watch.
    fn guard_fd(&self) -> Option<BorrowedFd<'_>> {
        if self.guard_done {
            return None;
        }
        self.guard.as_ref().map(ExecGuard::fd)
    }
}

/// Capture both streams until the leader exited and both are closed, or
/// kill the tree at the deadline or on cancellation (DESIGN §16.6).
fn capture_until_exit(
    running: &mut Running,
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
            let _ = running.tree.kill_and_reap();
            return Err(with_containment_notes(
                with_overflow_note(cancelled_error(started, true), stdout, stderr, limit),
                running,
            ));
        }
        let now = Instant::now();
        if now >= request.deadline {
            let _ = running.tree.kill_and_reap();
            return Err(with_containment_notes(
                with_overflow_note(deadline_error(started, true), stdout, stderr, limit),
                running,
            ));
        }
        if !leader_exited && running.tree.exit_fd().is_none() {
            leader_exited = running
                .tree
                .leader_exited()
                .map_err(|error| HostError::io("could not observe the child", &error))?;
            if leader_exited {
                running.tree.kill_after_exit();
            }
        }
        if leader_exited
            && stdout.is_closed()
            && stderr.is_closed()
            && running.report.fd().is_none()
        {
            return Ok(());
        }
        let exit = if leader_exited {
            None
        } else {
            running.tree.exit_fd()
        };
        let wake = cancel.wake_fd();
        let mut until = request.deadline;
        if wake.is_none() || (!leader_exited && exit.is_none()) {
            until = until.min(now + FALLBACK_TICK);
        }
        let ready = wait_for_events(
            [
                stdout.fd(),
                stderr.fd(),
                exit,
                wake,
                running.guard_fd(),
                running.report.fd(),
            ],
            until,
        )
        .map_err(|error| HostError::io("could not wait for the child", &error))?;
        if ready[5].is_some() {
            running
                .read_report()
                .map_err(|error| HostError::io("could not read the child's report", &error))?;
        }
        if let Some(events) = ready[4] {
            if events.contains(PollFlags::IN) {
                running.answer_guard();
            } else {
                // No task carries the filter any more (POLLHUP): keep the
                // count of refusals, stop watching.
                running.guard_done = true;
            }
        }
        if ready[0].is_some() {
            stdout.drain().map_err(|error| {
                HostError::io("could not read the child's standard output", &error)
            })?;
        }
        if ready[1].is_some() {
            stderr.drain().map_err(|error| {
                HostError::io("could not read the child's standard error", &error)
            })?;
        }
        if ready[2].is_some() {
            leader_exited = true;
            // The leader is a zombie now: its PID still pins the group and
            // session, so the rest of the tree is killed before the reap.
            running.tree.kill_after_exit();
        }
    }
}

/// One wait over the present descriptors of `slots` (each for
/// readability) until `until`; what fired on each.
fn wait_for_events(
    slots: [Option<BorrowedFd<'_>>; 6],
    until: Instant,
) -> io::Result<[Option<PollFlags>; 6]> {
    let mut fds = Vec::with_capacity(slots.len());
    let mut index = [None; 6];
    for (slot, fd) in index.iter_mut().zip(slots) {
        if let Some(fd) = fd {
            *slot = Some(fds.len());
            fds.push(poll::interest(fd, PollFlags::IN));
        }
    }
    poll::wait_until(&mut fds, until)?;
    Ok(index.map(|slot| {
        slot.map(|at| fds[at].revents())
            .filter(|revents| !revents.is_empty())
    }))
}

/// Reap the leader and turn what the command left into its outcome or the
/// error that replaces it (escapes, cleanup problems, overflow, size).
fn finish(
    mut running: Running,
    stdout: Capture,
    stderr: Capture,
    limit: usize,
    program: &str,
    notes: &SpawnNotes,
    config_private_dirs: &PrivateDirsPool,
) -> Result<CommandOutcomeData, HostError> {
    let status = running
        .tree
        .kill_and_reap()
        .map_err(|error| HostError::io("could not reap the child", &error))?;
    if let Some(error) = running.spawn_failure(program, notes) {
        return Err(error);
    }
    // In a PID namespace the reaped process is the init; the program's own
    // status is what the init sent.
    let status = running
        .status_pipe
        .as_ref()
        .and_then(command_spawn::program_status)
        .unwrap_or(status);
    let mut problems: Vec<String> = running.tree.problems().to_vec();
    if let Some(pids) = running.containment.pids.as_mut() {
        problems.extend(pids.remove());
    }
    if let Some(private) = running.containment.private.take() {
        problems.extend(config_private_dirs.give_back(private));
    }
    let (status, signal) = encode_status(status);
    if !running.tree.escaped().is_empty() {
        return Err(with_containment_notes(
            HostError::new(
                ErrorCode::ResourceLimit,
                "command left processes running outside its session",
            )
            .with_context(status_note(status, signal))
            .with_help("Run the program in the foreground; a command may not leave daemons behind")
            .with_exit_status(Some(status)),
            &running,
        ));
    }
    if !problems.is_empty() {
        let mut error = HostError::new(
            ErrorCode::Io,
            "command ran, but its containment could not be cleaned up",
        )
        .with_context(status_note(status, signal))
        .with_exit_status(Some(status));
        for problem in problems {
            error = error.with_context(format!("cleanup: {problem}"));
        }
        return Err(with_containment_notes(error, &running));
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

/// The Landlock execute ruleset and identity verdict of a command granted
/// by name (DESIGN §16.2, §16.6), or `None` when every program is granted.
/// Fails closed: a program that is a programming environment under another
/// name is refused; where Landlock is available but the ruleset cannot be
/// built, and where it is required (`require_landlock`) but unavailable,
/// nothing starts.
fn exec_ruleset(
    config: &ProcessHostConfig,
    program: &str,
    path: &std::path::Path,
) -> Result<Option<Arc<ExecRuleset>>, HostError> {
    let support = landlock_support();
    let shown = super::grants::truncate_for_display(program);
    if !support.available() && config.require_landlock() {
        return Err(HostError::new(
            ErrorCode::ProcessSpawn,
            format!("could not start `{shown}`: Landlock is required but unavailable"),
        )
        .with_context(format!("landlock: {}", support.summary()))
        .with_help("Run on Linux 5.13 or later with Landlock enabled (lsm=landlock), or do not require Landlock (ProcessHostConfig::with_require_landlock)"));
    }
    if config.grants().any_program() {
        return Ok(None);
    }
    let resolved = config
        .rulesets()
        .for_command(path, config.cwd(), program, &config.search_dirs())
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
        })?;
    if let Some(why) = resolved.refusal() {
        return Err(HostError::new(
            ErrorCode::Validation,
            format!("capability denied: `{shown}` is a programming environment under another name"),
        )
        .with_context(why.to_owned())
        .with_context(format!("`{shown}` resolved to `{}`", path.display()))
        .with_help("Grant the programs it would run by name instead, or grant every program on purpose with `process.spawn`"));
    }
    Ok(Some(resolved))
}

/// The exec guard's filter for a command granted by name (DESIGN §16.6),
/// `None` for the unscoped grant. Where the kernel has no guard, the
/// program is checked against the long list (DESIGN §16.2) and runs
/// without one: a grant accepted under the guard's rule never runs
/// without the guard.
fn exec_guard(
    granted_by_name: bool,
    program: &str,
) -> Result<Option<&'static GuardProgram>, HostError> {
    if !granted_by_name {
        return Ok(None);
    }
    match (exec_guard_support(), GuardProgram::get()) {
        (Ok(()), Some(program)) => Ok(Some(program)),
        _ => {
            super::grants::refuse_command_runner(GrantRule::ProgramList, program)?;
            Ok(None)
        }
    }
}

/// The Landlock state of a command, as an error context line: the files
/// its execute ruleset allows, or how many layers it entered.
fn landlock_note(layers: &[RawFd], files: Option<&[std::path::PathBuf]>) -> String {
    match files {
        Some(files) if !files.is_empty() => format!(
            "landlock: executable files: {}",
            files
                .iter()
                .map(|file| file.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ if !layers.is_empty() => format!(
            "landlock: {} layer(s); {}",
            layers.len(),
            landlock_support().summary()
        ),
        _ => format!("landlock: not applied; {}", landlock_support().summary()),
    }
}

/// The command's cgroup v2 (DESIGN §17.2), in cgroup mode, its v1 `pids`
/// cgroup where its process limit needs one, or the limit as
/// `RLIMIT_NPROC` in its user namespace (DESIGN §16.7). A process limit
/// that cannot be applied fails the command closed.
#[allow(clippy::type_complexity)]
fn command_cgroups(
    config: &ProcessHostConfig,
) -> Result<(Option<ChildCgroup>, Option<PidsCgroup>, Option<u64>), HostError> {
    let failed = |why: String| {
        HostError::new(ErrorCode::Io, "could not contain the command in a cgroup")
            .with_context(why)
            .with_help("Use process-group containment where cgroup v2 is not writable")
    };
    let hierarchy = cgroup::resolve(config.containment()).map_err(failed)?;
    let pids_max = config.command_pids_max();
    let enforcement = pids_max.map(|_| cgroup::command_pids_enforcement(hierarchy));
    let cgroup = match hierarchy {
        Some(hierarchy) => {
            let limits = CgroupLimits {
                memory_max: None,
                pids_max,
            };
            Some(
                ChildCgroup::create(hierarchy, ChildKind::Command, limits).map_err(|error| {
                    failed(format!("creating the command's cgroup failed: {error}"))
                })?,
            )
        }
        None => None,
    };
    let pids = match (pids_max, enforcement) {
        (Some(max), Some(PidsEnforcement::CgroupV1(found))) => {
            Some(PidsCgroup::create(found, max).map_err(|error| {
                HostError::new(
                    ErrorCode::ProcessSpawn,
                    format!("could not apply the command's process limit ({max})"),
                )
                .with_context(format!(
                    "creating its cgroup v1 pids cgroup under {} failed: {error}",
                    found.own().display()
                ))
                .with_help("Run where a cgroup with the pids controller is writable, or lift the limit (--command-pids-max max)")
            })?)
        }
        (Some(max), Some(PidsEnforcement::UserNamespace)) => {
            return Ok((cgroup, None, Some(max)));
        }
        (Some(max), Some(PidsEnforcement::Unavailable(why))) => {
            return Err(HostError::new(
                ErrorCode::ProcessSpawn,
                format!("could not apply the command's process limit ({max}): no pids controller"),
            )
            .with_context(format!("command pids limit: {}", PidsEnforcement::Unavailable(why).summary()))
            .with_help("Run where a cgroup with the pids controller is writable (as root, or in a delegated cgroup v2 subtree), or lift the limit (--command-pids-max max)"));
        }
        _ => None,
    };
    Ok((cgroup, pids, None))
}

/// Escapes the cgroup caught, and how the command was contained, as
/// context.
fn with_containment_notes(error: HostError, running: &Running) -> HostError {
    let tree = &running.tree;
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
    if tree.in_pid_namespace() {
        error = error.with_context("containment: a PID namespace per command");
    }
    if let Some(guard) = &running.guard
        && guard.refused() > 0
    {
        error = error.with_context(format!(
            "exec guard: refused {} exec attempt(s) after the program started",
            guard.refused()
        ));
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

fn spawn_error(
    program: &str,
    error: &io::Error,
    step: Option<command_spawn::Step>,
    notes: &SpawnNotes,
) -> HostError {
    let mut host_error = HostError::new(
        ErrorCode::ProcessSpawn,
        format!(
            "could not start `{}`",
            super::grants::truncate_for_display(program)
        ),
    )
    .with_context(format!("operating-system error: {error}"));
    if let Some(step) = step {
        host_error = host_error.with_context(format!("failed step: {}", step.describe()));
    }
    host_error
        .with_context(notes.landlock.clone())
        .with_context(format!(
            "exec guard: {}",
            if notes.guarded {
                "in force"
            } else {
                "not applied"
            }
        ))
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
