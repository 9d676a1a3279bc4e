//! The cgroup v2 hierarchy of this parent (DESIGN §17.2): find the v2 mount
//! and this process's cgroup, remove stale cgroups of crashed parents,
//! create the parent's own `quirl-lua-<pid>-<start>` cgroup, enable the
//! `memory` and `pids` controllers, and remove it all at exit.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use super::child::{EMPTY_WAIT_MAX, kill_members, remove_dir, wait_until_empty};
use crate::child_process::proc_stat::read_stat;

/// Prefix of the parent's own cgroup: `quirl-lua-<pid>-<start time>`.
pub(super) const OWN_PREFIX: &str = "quirl-lua-";

/// The parent's own cgroup and what can be limited in it.
#[derive(Debug)]
pub(crate) struct Hierarchy {
    pub(super) own: PathBuf,
    creator: u32,
    pub(super) memory: bool,
    pub(super) pids: bool,
    notes: Vec<String>,
    pub(super) next: AtomicU64,
}

impl Hierarchy {
    /// The parent's own cgroup directory.
    pub(crate) fn own(&self) -> &Path {
        &self.own
    }

    /// Whether `memory.max` can be set in child cgroups.
    pub(crate) fn memory(&self) -> bool {
        self.memory
    }

    /// Whether `pids.max` can be set in child cgroups.
    pub(crate) fn pids(&self) -> bool {
        self.pids
    }

    /// Why a controller is missing, and stale cgroups that were removed.
    pub(crate) fn notes(&self) -> &[String] {
        &self.notes
    }
}

static HIERARCHY: OnceLock<Result<Hierarchy, String>> = OnceLock::new();

pub(super) fn hierarchy() -> Result<&'static Hierarchy, &'static str> {
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
    // never unwinds (std and rustix offer no `atexit`, and no Rust
    // destructor runs at `exit`, so this is the only hook) (it only makes fallible calls whose errors it drops).
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
pub(super) fn unescape_mountinfo(field: &str) -> String {
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
pub(super) fn relative_to_mount(cgroup: &str, mount_root: &str) -> Option<PathBuf> {
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
pub(super) fn process_start_time(pid: u32) -> Option<u64> {
    read_stat(libc::pid_t::try_from(pid).ok()?).map(|stat| stat.start_time)
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
pub(super) fn parse_own_name(name: &str) -> Option<(u32, u64)> {
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
}
