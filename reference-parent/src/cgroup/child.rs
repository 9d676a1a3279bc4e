//! One child's cgroup (DESIGN §17.2, §17.4): create it with its limits, let
//! the child join it before `exec`, kill every member (`cgroup.kill`, or
//! freeze and kill on older kernels), wait for `populated 0` and remove it
//! — exactly once, on every path.

use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::hierarchy::Hierarchy;
use crate::child_process::poll;

/// How long removing a child cgroup waits for `populated 0` after the kill.
pub const EMPTY_WAIT_MAX: Duration = Duration::from_secs(2);

/// Kill rounds of the freeze fallback (kernels without `cgroup.kill`).
const FREEZE_KILL_ROUNDS: usize = 64;

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
    /// The directory itself, opened close-on-exec: what `clone3`'s
    /// `CLONE_INTO_CGROUP` takes to start a child inside it.
    dir: File,
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
        let opened = File::options()
            .write(true)
            .open(path.join("cgroup.procs"))
            .and_then(|procs| Ok((procs, File::open(&path)?)));
        let (procs, dir) = opened.inspect_err(|_| {
            let _ = fs::remove_dir(&path);
        })?;
        let cgroup = Self {
            procs,
            dir,
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

    /// The cgroup directory, open (for `CLONE_INTO_CGROUP`).
    pub(crate) fn dir_fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// Tests: the same cgroup, but `dir` handed to `clone3` in its place
    /// (a directory that is no cgroup makes `CLONE_INTO_CGROUP` fail).
    #[cfg(test)]
    pub(crate) fn with_clone_dir(mut self, dir: File) -> Self {
        self.dir = dir;
        self
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

/// Runs in the new child (`fork`ed or vfork-style, DESIGN §17.2) before
/// `exec`: move this process into the cgroup whose `cgroup.procs` is
/// `procs` (writing `0` means "the writer").
///
/// One `write(2)` — async-signal-safe, no allocation.
pub(crate) fn enter_in_child(procs: RawFd) -> io::Result<()> {
    // SAFETY: `procs` is the `cgroup.procs` descriptor of a `ChildCgroup`
    // the parent keeps open across the whole spawn; the fork (or the clone,
    // which copies the descriptor table too) duplicated it into this child,
    // where nothing closes it before exec. A raw number
    // crosses the fork because the `pre_exec` closure must be `'static`,
    // which a `BorrowedFd` of the parent's `File` cannot be.
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
pub(super) fn kill_members(dir: &Path) -> io::Result<()> {
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
pub(super) fn wait_until_empty(dir: &Path, deadline: Instant) -> io::Result<bool> {
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
pub(super) fn remove_dir(dir: &Path) -> io::Result<()> {
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
    use crate::cgroup::{Containment, resolve};

    /// A child cgroup with one `sleep` (and its `setsid` escapee) in it.
    fn populated_cgroup(test: &str) -> Option<(ChildCgroup, std::process::Child)> {
        use std::os::unix::process::CommandExt;
        let Ok(Some(hierarchy)) = resolve(Containment::Auto) else {
            crate::test_environment::skip("cgroup", test, "no writable cgroup v2 hierarchy here");
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
        // `setsid -f` forks and its first process exits, and `sh` execs
        // `sleep` afterwards: two or three members of other names can be
        // seen for a moment (two before the fork), so wait for the settled
        // state, two members that both run `sleep`.
        let settled = |members: &[u32]| {
            members.len() == 2
                && members.iter().all(|pid| {
                    fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|name| name.trim() == "sleep")
                })
        };
        while !settled(&cgroup.members().unwrap()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            settled(&cgroup.members().unwrap()),
            "sh (now sleep) and its escapee"
        );
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
}
