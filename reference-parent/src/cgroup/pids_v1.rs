//! The process limit of a host command where cgroup v2 has no `pids`
//! controller (DESIGN §16.7): a hybrid layout binds `pids` to a cgroup v1
//! hierarchy (`/sys/fs/cgroup/pids`), where the same limit (`pids.max`:
//! `fork` fails with `EAGAIN` past it) is set per command. Containment and
//! the kill stay with cgroup v2, the PID namespace or the process group;
//! this hierarchy only counts.
//!
//! Layout as in v2: below this process's own v1 `pids` cgroup (the `pids`
//! line of `/proc/self/cgroup`), a `quirl-lua-<pid>-<start time>` cgroup of
//! this parent, removed at exit (and, after a crash, by the next parent:
//! the same stale sweep), and in it one `command-<n>` per command, which
//! the child joins before `exec` by writing `0` to its `cgroup.procs`.

use std::fs::{self, File};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::hierarchy::{
    OWN_PREFIX, parse_own_name, process_start_time, relative_to_mount, unescape_mountinfo,
};

/// How long removing a command's cgroup waits for it to empty.
const EMPTY_WAIT_MAX: Duration = Duration::from_secs(2);

/// This parent's own cgroup in the v1 `pids` hierarchy.
#[derive(Debug)]
pub(crate) struct PidsHierarchy {
    own: PathBuf,
    creator: u32,
    next: AtomicU64,
}

impl PidsHierarchy {
    /// The parent's own cgroup directory.
    pub(crate) fn own(&self) -> &Path {
        &self.own
    }
}

static PIDS_V1: OnceLock<Result<PidsHierarchy, String>> = OnceLock::new();

/// The v1 `pids` hierarchy of this process, or why there is none.
pub(crate) fn pids_v1() -> Result<&'static PidsHierarchy, &'static str> {
    PIDS_V1
        .get_or_init(discover)
        .as_ref()
        .map_err(String::as_str)
}

fn discover() -> Result<PidsHierarchy, String> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|error| format!("/proc/self/mountinfo is unreadable: {error}"))?;
    let (mount_root, mount_point) = find_pids_v1_mount(&mountinfo)
        .ok_or_else(|| "no cgroup v1 hierarchy has the pids controller".to_owned())?;
    let membership = fs::read_to_string("/proc/self/cgroup")
        .map_err(|error| format!("/proc/self/cgroup is unreadable: {error}"))?;
    let current_path = membership
        .lines()
        .find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let _id = fields.next()?;
            let controllers = fields.next()?;
            let path = fields.next()?;
            controllers
                .split(',')
                .any(|name| name == "pids")
                .then_some(path)
        })
        .ok_or_else(|| "this process has no cgroup v1 pids membership".to_owned())?;
    let current =
        mount_point.join(relative_to_mount(current_path, &mount_root).ok_or_else(|| {
            format!("this process's pids cgroup {current_path} is outside its mount")
        })?);
    let creator = std::process::id();
    let start = process_start_time(creator)
        .ok_or_else(|| "this process's start time is unreadable".to_owned())?;
    remove_stale(&current);
    let own = current.join(format!("{OWN_PREFIX}{creator}-{start}"));
    match fs::create_dir(&own) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => {
            return Err(format!(
                "cannot create a cgroup under {} ({error})",
                current.display()
            ));
        }
    }
    if !own.join("pids.max").exists() {
        let _ = fs::remove_dir(&own);
        return Err(format!("{} has no pids.max", own.display()));
    }
    // SAFETY: `remove_own_at_exit` is an `extern "C" fn()` that never
    // unwinds (it only makes fallible calls whose errors it drops). A
    // failed registration leaves the directory to the next parent's stale
    // sweep.
    let _ = unsafe { libc::atexit(remove_own_at_exit) };
    Ok(PidsHierarchy {
        own,
        creator,
        next: AtomicU64::new(1),
    })
}

/// `(root, mount point)` of the cgroup v1 mount whose super options name
/// the `pids` controller.
fn find_pids_v1_mount(mountinfo: &str) -> Option<(String, PathBuf)> {
    mountinfo.lines().find_map(|line| {
        let (mount, filesystem) = line.split_once(" - ")?;
        let mut parts = filesystem.split_whitespace();
        if parts.next()? != "cgroup" {
            return None;
        }
        let _source = parts.next()?;
        let options = parts.next()?;
        if !options.split(',').any(|option| option == "pids") {
            return None;
        }
        let fields: Vec<&str> = mount.split_whitespace().collect();
        Some((
            unescape_mountinfo(fields.get(3)?),
            PathBuf::from(unescape_mountinfo(fields.get(4)?)),
        ))
    })
}

/// Remove the `quirl-lua-<pid>-<start>` cgroups of parents that are gone
/// (their commands' cgroups first). A cgroup that still has members is
/// left (a v1 cgroup cannot be killed as a whole; a member outlived its
/// parent, which the PID namespace or cgroup v2 prevents).
fn remove_stale(current: &Path) {
    let Ok(entries) = fs::read_dir(current) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((pid, start)) = name.to_str().and_then(parse_own_name) else {
            continue;
        };
        if process_start_time(pid) == Some(start) {
            continue;
        }
        remove_tree(&entry.path());
    }
}

fn remove_tree(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                let _ = fs::remove_dir(entry.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

extern "C" fn remove_own_at_exit() {
    if let Some(Ok(found)) = PIDS_V1.get()
        && found.creator == std::process::id()
    {
        remove_tree(&found.own);
    }
}

/// One command's v1 `pids` cgroup, removed once it is empty.
#[derive(Debug)]
pub(crate) struct PidsCgroup {
    path: PathBuf,
    procs: File,
    removed: bool,
}

impl PidsCgroup {
    /// A cgroup whose tree may hold at most `max` processes.
    pub(crate) fn create(hierarchy: &PidsHierarchy, max: u64) -> io::Result<Self> {
        let number = hierarchy.next.fetch_add(1, Ordering::Relaxed);
        let path = hierarchy.own.join(format!("command-{number}"));
        fs::create_dir(&path)?;
        let made = fs::write(path.join("pids.max"), max.to_string())
            .and_then(|()| File::options().write(true).open(path.join("cgroup.procs")));
        match made {
            Ok(procs) => Ok(Self {
                path,
                procs,
                removed: false,
            }),
            Err(error) => {
                let _ = fs::remove_dir(&path);
                Err(error)
            }
        }
    }

    /// The descriptor the child writes `0` to before `exec`.
    pub(crate) fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// The cgroup directory.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Remove the cgroup once its members are gone (the caller has killed
    /// and reaped the command). Idempotent; a problem as a sentence.
    pub(crate) fn remove(&mut self) -> Option<String> {
        if self.removed {
            return None;
        }
        self.removed = true;
        let until = Instant::now() + EMPTY_WAIT_MAX;
        loop {
            match fs::remove_dir(&self.path) {
                Ok(()) => return None,
                Err(error) if error.kind() == io::ErrorKind::NotFound => return None,
                Err(error)
                    if error.raw_os_error() == Some(libc::EBUSY) && Instant::now() < until =>
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(error) => {
                    return Some(format!(
                        "removing the pids cgroup {} failed: {error}",
                        self.path.display()
                    ));
                }
            }
        }
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_v1_pids_mount_of_a_hybrid_layout() {
        let mountinfo = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            find_pids_v1_mount(mountinfo),
            Some(("/".to_owned(), PathBuf::from("/sys/fs/cgroup/pids")))
        );
        assert_eq!(
            find_pids_v1_mount("41 31 0:38 / /x rw - cgroup2 cgroup2 rw,pids\n"),
            None
        );
    }

    #[test]
    fn a_command_cgroup_carries_the_limit_and_is_removed() {
        let Ok(hierarchy) = pids_v1() else {
            eprintln!(
                "SKIPPED a_command_cgroup_carries_the_limit_and_is_removed: no writable v1 pids hierarchy"
            );
            return;
        };
        let mut cgroup = PidsCgroup::create(hierarchy, 7).unwrap();
        assert_eq!(
            fs::read_to_string(cgroup.path().join("pids.max"))
                .unwrap()
                .trim(),
            "7"
        );
        let path = cgroup.path().to_path_buf();
        assert_eq!(cgroup.remove(), None);
        assert!(!path.exists());
    }
}
