//! Per-child cgroup v2 containment (SPEC §17.2): find a writable cgroup v2
//! hierarchy, keep one parent cgroup for this process, and create, fill,
//! kill and remove one child cgroup per worker and per host command.
//!
//! # Layout
//!
//! The cgroup v2 mount is found in `/proc/self/mountinfo` (it need not be at
//! `/sys/fs/cgroup`: a hybrid layout mounts it beside the v1 controllers,
//! e.g. at `/sys/fs/cgroup/unified`), this process's cgroup in
//! `/proc/self/cgroup` (the `0::` line). Under that cgroup the parent creates
//! its own cgroup `quirl-lua-<pid>-<start time>` and, inside it, one cgroup
//! per child: `worker-<n>` or `command-<n>`. The parent itself never moves:
//! its own cgroup holds no process, only child cgroups, so the "no internal
//! processes" rule of cgroup v2 allows controllers to be enabled in it.
//!
//! # Controllers
//!
//! `memory` and `pids` are used when the hierarchy has them: they are
//! enabled in the `cgroup.subtree_control` of this process's cgroup (which
//! the kernel refuses with `EBUSY` for a non-root cgroup that holds
//! processes) and of the parent's own cgroup. Whatever cannot be enabled is
//! recorded as a note and the limit is not set; containment and the kill do
//! not need any controller (`cgroup.kill`, `cgroup.procs`, `cgroup.events`
//! and `cgroup.freeze` are core files).
//!
//! # Placement before any code runs
//!
//! The child joins its cgroup from the spawn's pre-exec step by writing `0`
//! to `cgroup.procs` through a descriptor opened (close-on-exec) before the
//! fork. `clone3(CLONE_INTO_CGROUP)` was not chosen: `std::process::Command`
//! cannot pass it, and re-implementing the spawn (pipes, exec-error report,
//! signal mask) around a raw `clone3` is far more unsafe code than one
//! `write(2)`, which is async-signal-safe and allocates nothing. The program
//! image runs only after `exec`, which follows the write, so nothing of the
//! program ever runs outside the cgroup; a failed write fails the spawn.
//!
//! # Ending a child cgroup
//!
//! `cgroup.kill` (Linux ≥ 5.14) SIGKILLs every member, including processes
//! forked while the kill runs. Older kernels: `cgroup.freeze`, then SIGKILL
//! to every pid in `cgroup.procs`, in rounds until it is empty (a frozen
//! member cannot fork, and a pid listed there stays allocated until the
//! member is killed). Then the parent waits until `cgroup.events` says
//! `populated 0`: the file raises `POLLPRI` on every change, so the wait is
//! one `ppoll` per change, never a sleep tick, bounded by
//! [`EMPTY_WAIT_MAX`]. Only then is the directory removed.
//!
//! # Nothing left behind
//!
//! Every child cgroup is owned by a value that removes it on drop. The
//! parent's own cgroup is removed by an `atexit` handler at normal exit
//! (killing whatever is still in it). A parent that crashed leaves its
//! cgroup behind; the next parent that starts under the same cgroup removes
//! every `quirl-lua-<pid>-<start>` directory whose creator is gone (no
//! process `<pid>`, or one with another start time — so a reused pid is not
//! mistaken for the creator).
//!
//! What this module is not: a sandbox against root. A process running as
//! root that can write to the cgroup filesystem can move itself out of its
//! cgroup; cgroup containment binds every other process.

use std::fmt;
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::poll;

/// How long removing a child cgroup waits for `populated 0` after the kill.
pub const EMPTY_WAIT_MAX: Duration = Duration::from_secs(2);

/// Kill rounds of the freeze fallback (kernels without `cgroup.kill`).
const FREEZE_KILL_ROUNDS: usize = 64;

/// Prefix of the parent's own cgroup: `quirl-lua-<pid>-<start time>`.
const OWN_PREFIX: &str = "quirl-lua-";

/// Which containment a parent uses for its children (SPEC §17.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Containment {
    /// A cgroup per child when a writable cgroup v2 hierarchy is available,
    /// process groups otherwise.
    #[default]
    Auto,
    /// A cgroup per child; spawning fails when cgroup v2 is not writable.
    Cgroup,
    /// Process groups and sessions only (the containment of SPEC §17.3).
    ProcessGroup,
}

impl Containment {
    /// `auto`, `cgroup` or `process-group`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Cgroup => "cgroup",
            Self::ProcessGroup => "process-group",
        }
    }
}

impl fmt::Display for Containment {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl FromStr for Containment {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(Self::Auto),
            "cgroup" => Ok(Self::Cgroup),
            "process-group" => Ok(Self::ProcessGroup),
            other => Err(format!(
                "unknown containment `{other}` (use auto, cgroup or process-group)"
            )),
        }
    }
}

/// Which containment is in effect and why, for diagnostics (`stats`,
/// `--json` error contexts, `quirl-lua --version --verbose`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ContainmentReport {
    /// `cgroup` or `process-group`.
    pub mode: &'static str,
    /// What was asked for: `auto`, `cgroup` or `process-group`.
    pub requested: &'static str,
    /// The parent's own cgroup directory, in cgroup mode.
    pub cgroup: Option<String>,
    /// Controllers enabled for child cgroups (`memory`, `pids`).
    pub controllers: Vec<&'static str>,
    /// Why a controller or cgroup mode is not in use.
    pub notes: Vec<String>,
}

impl ContainmentReport {
    /// One line, e.g. `cgroup v2 (/sys/fs/cgroup/…; controllers: pids)`.
    pub fn summary(&self) -> String {
        let notes = if self.notes.is_empty() {
            String::new()
        } else {
            format!("; {}", self.notes.join("; "))
        };
        match &self.cgroup {
            Some(path) => {
                let controllers = if self.controllers.is_empty() {
                    "none".to_owned()
                } else {
                    self.controllers.join(", ")
                };
                format!("cgroup v2 ({path}; controllers: {controllers}{notes})")
            }
            None => format!("process-group (requested {}{notes})", self.requested),
        }
    }
}

/// What `choice` resolves to in this process, and why.
pub fn containment_report(choice: Containment) -> ContainmentReport {
    let mut report = ContainmentReport {
        mode: "process-group",
        requested: choice.as_str(),
        cgroup: None,
        controllers: Vec::new(),
        notes: Vec::new(),
    };
    if choice == Containment::ProcessGroup {
        report
            .notes
            .push("process-group containment was forced".to_owned());
        return report;
    }
    match hierarchy() {
        Ok(found) => {
            report.mode = "cgroup";
            report.cgroup = Some(found.own.display().to_string());
            if found.memory {
                report.controllers.push("memory");
            }
            if found.pids {
                report.controllers.push("pids");
            }
            report.notes.extend(found.notes.iter().cloned());
        }
        Err(why) => report
            .notes
            .push(format!("cgroup v2 is not available: {why}")),
    }
    report
}

/// The hierarchy for `choice`: `Ok(None)` means process groups.
///
/// `Cgroup` fails with the reason when no writable cgroup v2 hierarchy is
/// available; `Auto` falls back to `None`.
pub(crate) fn resolve(choice: Containment) -> Result<Option<&'static Hierarchy>, String> {
    match choice {
        Containment::ProcessGroup => Ok(None),
        Containment::Auto => Ok(hierarchy().ok()),
        Containment::Cgroup => hierarchy()
            .map(Some)
            .map_err(|why| format!("cgroup containment was requested but {why}")),
    }
}

/// The parent's own cgroup and what can be limited in it.
#[derive(Debug)]
pub(crate) struct Hierarchy {
    own: PathBuf,
    creator: u32,
    memory: bool,
    pids: bool,
    notes: Vec<String>,
    next: AtomicU64,
}

static HIERARCHY: OnceLock<Result<Hierarchy, String>> = OnceLock::new();

fn hierarchy() -> Result<&'static Hierarchy, &'static str> {
    HIERARCHY
        .get_or_init(discover)
        .as_ref()
        .map_err(String::as_str)
}

/// Find the v2 mount and this process's cgroup, remove stale cgroups of
/// crashed parents, create the own cgroup, enable controllers.
fn discover() -> Result<Hierarchy, String> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|error| format!("/proc/self/mountinfo is unreadable: {error}"))?;
    let (mount_root, mount_point) = find_cgroup2_mount(&mountinfo)
        .ok_or_else(|| "no cgroup2 filesystem is mounted".to_owned())?;
    let membership = fs::read_to_string("/proc/self/cgroup")
        .map_err(|error| format!("/proc/self/cgroup is unreadable: {error}"))?;
    let current_path = membership
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or_else(|| "this process has no cgroup v2 membership".to_owned())?;
    let current =
        mount_point.join(relative_to_mount(current_path, &mount_root).ok_or_else(|| {
            format!("this process's cgroup {current_path} is outside the cgroup2 mount")
        })?);
    let creator = std::process::id();
    let start = process_start_time(creator)
        .ok_or_else(|| "this process's start time is unreadable".to_owned())?;
    let mut notes = remove_stale(&current);
    let own = current.join(format!("{OWN_PREFIX}{creator}-{start}"));
    match fs::create_dir(&own) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => {
            return Err(format!(
                "cannot create a cgroup under {} ({error}): run as root or delegate a cgroup v2 subtree to this user",
                current.display()
            ));
        }
    }
    if !own.join("cgroup.kill").exists() && !own.join("cgroup.freeze").exists() {
        let _ = fs::remove_dir(&own);
        return Err(
            "the kernel has neither cgroup.kill nor cgroup.freeze (Linux < 5.2)".to_owned(),
        );
    }
    // SAFETY: `remove_own_cgroup_at_exit` is an `extern "C" fn()` that
    // never unwinds (it only makes fallible calls whose errors it drops).
    // Registration failure only means the directory is left for the next
    // parent's stale sweep, so its result is recorded, not fatal.
    if unsafe { libc::atexit(remove_own_cgroup_at_exit) } != 0 {
        notes.push(
            "could not register the exit cleanup; a later parent removes this cgroup".to_owned(),
        );
    }
    let memory = enable_controller("memory", &current, &own, &mut notes);
    let pids = enable_controller("pids", &current, &own, &mut notes);
    Ok(Hierarchy {
        own,
        creator,
        memory,
        pids,
        notes,
        next: AtomicU64::new(1),
    })
}

/// `(root, mount point)` of the first cgroup2 mount in a mountinfo text.
fn find_cgroup2_mount(mountinfo: &str) -> Option<(String, PathBuf)> {
    mountinfo.lines().find_map(|line| {
        let (mount, filesystem) = line.split_once(" - ")?;
        if filesystem.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let fields: Vec<&str> = mount.split_whitespace().collect();
        let root = unescape_mountinfo(fields.get(3)?);
        let point = unescape_mountinfo(fields.get(4)?);
        Some((root, PathBuf::from(point)))
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'\\'
            && let Some(octal) = field.get(index + 1..index + 4)
            && let Ok(value) = u8::from_str_radix(octal, 8)
        {
            out.push(value);
            index += 4;
            continue;
        }
        out.push(bytes[index]);
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup path relative to a mount whose root is `mount_root`.
fn relative_to_mount(cgroup: &str, mount_root: &str) -> Option<PathBuf> {
    let rest = if mount_root == "/" {
        cgroup
    } else {
        let rest = cgroup.strip_prefix(mount_root)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest
    };
    let rest = rest.trim_start_matches('/');
    let relative = PathBuf::from(rest);
    relative
        .components()
        .all(|part| matches!(part, std::path::Component::Normal(_)))
        .then_some(relative)
}

/// Field 22 of `/proc/PID/stat` (clock ticks since boot), `None` if the
/// process does not exist.
fn process_start_time(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = text.get(text.rfind(')')? + 1..)?;
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// The session id of a process (`/proc/PID/stat` field 6).
pub(crate) fn process_session(pid: u32) -> Option<u32> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = text.get(text.rfind(')')? + 1..)?;
    rest.split_ascii_whitespace().nth(3)?.parse().ok()
}

/// Remove every `quirl-lua-<pid>-<start>` cgroup under `current` whose
/// creator is gone. Returns notes on what was removed or could not be.
fn remove_stale(current: &Path) -> Vec<String> {
    let mut notes = Vec::new();
    let Ok(entries) = fs::read_dir(current) else {
        return notes;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((pid, start)) = name.to_str().and_then(parse_own_name) else {
            continue;
        };
        if process_start_time(pid) == Some(start) {
            continue; // its creator is alive (another parent, or this one)
        }
        match remove_tree(&entry.path()) {
            Ok(()) => notes.push(format!(
                "removed the stale cgroup {} of a parent that is gone",
                entry.path().display()
            )),
            Err(error) => notes.push(format!(
                "could not remove the stale cgroup {}: {error}",
                entry.path().display()
            )),
        }
    }
    notes
}

/// `quirl-lua-<pid>-<start>` → `(pid, start)`.
fn parse_own_name(name: &str) -> Option<(u32, u64)> {
    let (pid, start) = name.strip_prefix(OWN_PREFIX)?.split_once('-')?;
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !(digits(pid) && digits(start)) {
        return None;
    }
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// Kill and remove a cgroup and every cgroup below it, deepest first.
fn remove_tree(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)?.flatten() {
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            remove_tree(&entry.path())?;
        }
    }
    kill_members(dir)?;
    if !wait_until_empty(dir, Instant::now() + EMPTY_WAIT_MAX)? {
        return Err(io::Error::other(format!(
            "still populated {} ms after the kill",
            EMPTY_WAIT_MAX.as_millis()
        )));
    }
    remove_dir(dir)
}

extern "C" fn remove_own_cgroup_at_exit() {
    if let Some(Ok(found)) = HIERARCHY.get()
        && found.creator == std::process::id()
    {
        let _ = remove_tree(&found.own);
    }
}

/// Enable `name` for the children of the parent's own cgroup; on failure
/// record why and return false.
fn enable_controller(name: &str, current: &Path, own: &Path, notes: &mut Vec<String>) -> bool {
    let listed = |path: &Path| {
        fs::read_to_string(path).is_ok_and(|text| text.split_whitespace().any(|word| word == name))
    };
    if !listed(&current.join("cgroup.controllers")) {
        notes.push(format!(
            "{name}: not available in this cgroup v2 hierarchy (in a hybrid layout it is bound to a v1 hierarchy); {name}.max is not set"
        ));
        return false;
    }
    if !listed(&current.join("cgroup.subtree_control"))
        && let Err(error) = fs::write(current.join("cgroup.subtree_control"), format!("+{name}"))
    {
        notes.push(format!(
            "{name}: could not be enabled in {} ({error}; a non-root cgroup that holds processes cannot enable controllers for its children); {name}.max is not set",
            current.display()
        ));
        return false;
    }
    if let Err(error) = fs::write(own.join("cgroup.subtree_control"), format!("+{name}")) {
        notes.push(format!(
            "{name}: could not be enabled in {} ({error}); {name}.max is not set",
            own.display()
        ));
        return false;
    }
    true
}

/// The limits of one child cgroup; `None` leaves a controller unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CgroupLimits {
    /// `memory.max` in bytes.
    pub(crate) memory_max: Option<u64>,
    /// `pids.max`.
    pub(crate) pids_max: Option<u64>,
}

/// What a child cgroup is for (its directory name prefix).
#[derive(Clone, Copy, Debug)]
pub(crate) enum ChildKind {
    Worker,
    Command,
}

/// One child's cgroup: removed (after a kill) exactly once, on every path.
#[derive(Debug)]
pub(crate) struct ChildCgroup {
    path: PathBuf,
    /// `cgroup.procs`, opened close-on-exec for the child's pre-exec write.
    procs: File,
    removed: bool,
}

impl ChildCgroup {
    /// Create a child cgroup with `limits` (each only where its controller
    /// is enabled).
    pub(crate) fn create(
        hierarchy: &Hierarchy,
        kind: ChildKind,
        limits: CgroupLimits,
    ) -> io::Result<Self> {
        let number = hierarchy.next.fetch_add(1, Ordering::Relaxed);
        let name = match kind {
            ChildKind::Worker => format!("worker-{number}"),
            ChildKind::Command => format!("command-{number}"),
        };
        let path = hierarchy.own.join(name);
        fs::create_dir(&path)?;
        let cgroup = Self {
            procs: File::options()
                .write(true)
                .open(path.join("cgroup.procs"))
                .inspect_err(|_| {
                    let _ = fs::remove_dir(&path);
                })?,
            path,
            removed: false,
        };
        // A failure here drops `cgroup`, which removes the directory.
        if hierarchy.memory
            && let Some(bytes) = limits.memory_max
        {
            fs::write(cgroup.path.join("memory.max"), bytes.to_string())?;
            // The fence is the memory limit: no swapping past it.
            let _ = fs::write(cgroup.path.join("memory.swap.max"), "0");
        }
        if hierarchy.pids
            && let Some(count) = limits.pids_max
        {
            fs::write(cgroup.path.join("pids.max"), count.to_string())?;
        }
        Ok(cgroup)
    }

    /// The descriptor the child writes `0` to (see [`enter_in_child`]).
    pub(crate) fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// The cgroup directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The pids in the cgroup now (exited members are not listed).
    pub(crate) fn members(&self) -> io::Result<Vec<u32>> {
        read_members(&self.path)
    }

    /// SIGKILL every member (see the module docs).
    pub(crate) fn kill(&self) -> io::Result<()> {
        kill_members(&self.path)
    }

    /// Kill, wait for `populated 0`, remove the directory. Idempotent;
    /// returns problems as sentences for an error's context.
    pub(crate) fn remove(&mut self) -> Vec<String> {
        if self.removed {
            return Vec::new();
        }
        self.removed = true;
        let mut problems = Vec::new();
        if let Err(error) = kill_members(&self.path) {
            problems.push(format!(
                "cgroup.kill of {} failed: {error}",
                self.path.display()
            ));
        }
        match wait_until_empty(&self.path, Instant::now() + EMPTY_WAIT_MAX) {
            Ok(true) => {}
            Ok(false) => problems.push(format!(
                "cgroup {} was still populated {} ms after the kill",
                self.path.display(),
                EMPTY_WAIT_MAX.as_millis()
            )),
            Err(error) => problems.push(format!(
                "waiting for cgroup {} to empty failed: {error}",
                self.path.display()
            )),
        }
        if let Err(error) = remove_dir(&self.path) {
            problems.push(format!(
                "removing cgroup {} failed: {error}",
                self.path.display()
            ));
        }
        problems
    }
}

impl Drop for ChildCgroup {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// Runs in the forked child before `exec`: move this process into the
/// cgroup whose `cgroup.procs` is `procs` (writing `0` means "the writer").
///
/// One `write(2)` — async-signal-safe, no allocation.
pub(crate) fn enter_in_child(procs: RawFd) -> io::Result<()> {
    // SAFETY: `procs` is the `cgroup.procs` descriptor of a `ChildCgroup`
    // the parent keeps open across the whole spawn; the fork duplicated it
    // into this child, where nothing closes it before exec.
    let procs = unsafe { BorrowedFd::borrow_raw(procs) };
    rustix::io::write(procs, b"0")?;
    Ok(())
}

fn read_members(dir: &Path) -> io::Result<Vec<u32>> {
    Ok(fs::read_to_string(dir.join("cgroup.procs"))?
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect())
}

/// `cgroup.kill`, or freeze + SIGKILL of every member on older kernels.
fn kill_members(dir: &Path) -> io::Result<()> {
    match fs::write(dir.join("cgroup.kill"), b"1") {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound && dir.exists() => {
            freeze_and_kill(dir)
        }
        Err(error) => Err(error),
    }
}

/// Kernels before 5.14: freeze the cgroup so no member can fork, then
/// SIGKILL each listed pid until the list is empty. A pid in the list of a
/// frozen cgroup is a member that cannot exit by itself, so it is not
/// reused before our signal unless someone else kills it in that instant.
fn freeze_and_kill(dir: &Path) -> io::Result<()> {
    fs::write(dir.join("cgroup.freeze"), b"1")?;
    for _ in 0..FREEZE_KILL_ROUNDS {
        let members = read_members(dir)?;
        if members.is_empty() {
            break;
        }
        for pid in members {
            if let Some(pid) = rustix::process::Pid::from_raw(pid.cast_signed()) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        let _ = wait_until_empty(dir, Instant::now() + Duration::from_millis(10));
    }
    // Killed tasks leave a frozen cgroup; thawing only matters for a kill
    // that failed, which must not leave members stopped forever.
    fs::write(dir.join("cgroup.freeze"), b"0")
}

/// Wait until `cgroup.events` says `populated 0`, or `deadline` passes.
///
/// The file raises `POLLPRI` whenever its content changes, and a read
/// re-arms that, so each round is one read and one `ppoll`.
fn wait_until_empty(dir: &Path, deadline: Instant) -> io::Result<bool> {
    let events = File::open(dir.join("cgroup.events"))?;
    let mut buffer = [0_u8; 256];
    loop {
        let count = events.read_at(&mut buffer, 0)?;
        let text = String::from_utf8_lossy(&buffer[..count]);
        let populated = text
            .lines()
            .find_map(|line| line.strip_prefix("populated "))
            .map(str::trim);
        if populated == Some("0") {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        let mut fds = [poll::interest(events.as_fd(), poll::PollFlags::PRI)];
        poll::wait_until(&mut fds, deadline)?;
    }
}

/// `rmdir`, retried briefly on `EBUSY` (the kernel may still be tearing
/// down the last member's css_set after `populated 0`).
fn remove_dir(dir: &Path) -> io::Result<()> {
    let mut attempts = 0;
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) if error.raw_os_error() == Some(libc::EBUSY) && attempts < 50 => {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_in_a_hybrid_layout() {
        let mountinfo = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            find_cgroup2_mount(mountinfo),
            Some(("/".to_owned(), PathBuf::from("/sys/fs/cgroup/unified")))
        );
        assert_eq!(
            find_cgroup2_mount("35 31 0:32 / /x rw - cgroup cgroup rw\n"),
            None
        );
        assert_eq!(unescape_mountinfo(r"/a\040b"), "/a b");
    }

    #[test]
    fn cgroup_paths_are_taken_relative_to_the_mount_root() {
        assert_eq!(relative_to_mount("/", "/"), Some(PathBuf::new()));
        assert_eq!(relative_to_mount("/a/b", "/"), Some(PathBuf::from("a/b")));
        assert_eq!(relative_to_mount("/a/b", "/a"), Some(PathBuf::from("b")));
        assert_eq!(relative_to_mount("/ab", "/a"), None);
        assert_eq!(relative_to_mount("/a/../b", "/"), None);
    }

    #[test]
    fn only_well_formed_own_names_are_parsed() {
        assert_eq!(parse_own_name("quirl-lua-12-345"), Some((12, 345)));
        assert_eq!(parse_own_name("quirl-lua-12-"), None);
        assert_eq!(parse_own_name("quirl-lua-x-1"), None);
        assert_eq!(parse_own_name("other-12-345"), None);
        assert_eq!(parse_own_name("quirl-lua-1-2-3"), None);
    }

    #[test]
    fn containment_names_round_trip() {
        for choice in [
            Containment::Auto,
            Containment::Cgroup,
            Containment::ProcessGroup,
        ] {
            assert_eq!(choice.as_str().parse::<Containment>(), Ok(choice));
        }
        assert!("cgroups".parse::<Containment>().is_err());
    }

    /// A child cgroup with one `sleep` (and its `setsid` escapee) in it.
    fn populated_cgroup(test: &str) -> Option<(ChildCgroup, std::process::Child)> {
        use std::os::unix::process::CommandExt;
        let Ok(Some(hierarchy)) = resolve(Containment::Auto) else {
            eprintln!("SKIPPED {test}: no writable cgroup v2 hierarchy here");
            return None;
        };
        let cgroup =
            ChildCgroup::create(hierarchy, ChildKind::Command, CgroupLimits::default()).unwrap();
        let procs = cgroup.procs_fd();
        let mut command = std::process::Command::new("/bin/sh");
        command.args(["-c", "setsid -f sleep 30; exec sleep 30"]);
        // SAFETY: `enter_in_child` is one write(2) on a descriptor that
        // `cgroup` keeps open across the spawn.
        unsafe {
            command.pre_exec(move || enter_in_child(procs));
        }
        let child = command.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        // `setsid -f` forks and its first process exits: three members can
        // be seen for a moment, so wait for exactly the settled two.
        while cgroup.members().unwrap().len() != 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(cgroup.members().unwrap().len(), 2, "sh and its escapee");
        Some((cgroup, child))
    }

    #[test]
    fn cgroup_kill_ends_every_member_and_remove_leaves_no_directory() {
        let Some((mut cgroup, mut child)) =
            populated_cgroup("cgroup_kill_ends_every_member_and_remove_leaves_no_directory")
        else {
            return;
        };
        cgroup.kill().unwrap();
        assert!(wait_until_empty(cgroup.path(), Instant::now() + EMPTY_WAIT_MAX).unwrap());
        let _ = child.wait();
        let path = cgroup.path().to_path_buf();
        assert!(cgroup.remove().is_empty());
        assert!(!path.exists());
        assert!(cgroup.remove().is_empty(), "remove is idempotent");
    }

    #[test]
    fn the_freeze_fallback_for_kernels_without_cgroup_kill_ends_every_member() {
        let Some((mut cgroup, mut child)) = populated_cgroup(
            "the_freeze_fallback_for_kernels_without_cgroup_kill_ends_every_member",
        ) else {
            return;
        };
        freeze_and_kill(cgroup.path()).unwrap();
        assert!(wait_until_empty(cgroup.path(), Instant::now() + EMPTY_WAIT_MAX).unwrap());
        assert_eq!(
            fs::read_to_string(cgroup.path().join("cgroup.freeze"))
                .unwrap()
                .trim(),
            "0",
            "thawed again"
        );
        let _ = child.wait();
        assert!(cgroup.remove().is_empty());
    }

    #[test]
    fn waiting_for_a_populated_cgroup_times_out_at_the_deadline() {
        let Some((mut cgroup, mut child)) =
            populated_cgroup("waiting_for_a_populated_cgroup_times_out_at_the_deadline")
        else {
            return;
        };
        let deadline = Instant::now() + Duration::from_millis(50);
        assert!(!wait_until_empty(cgroup.path(), deadline).unwrap());
        assert!(Instant::now() >= deadline);
        assert!(cgroup.remove().is_empty());
        let _ = child.wait();
    }

    #[test]
    fn forced_process_group_mode_says_so() {
        let report = containment_report(Containment::ProcessGroup);
        assert_eq!(report.mode, "process-group");
        assert!(report.summary().contains("forced"), "{}", report.summary());
    }
}
