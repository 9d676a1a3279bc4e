//! A host command's private directories (DESIGN §16.5): a directory under
//! the parent's temporary directory, with `home/` (the command's `HOME`
//! unless the embedder declares another) and `tmp/` (its `TMPDIR`) inside,
//! both empty when the command starts. The command may write there and
//! beneath its working directory, nowhere else (module `write_ruleset`).
//! Nothing it wrote there reaches a later command: when it has ended the
//! directories are emptied ([`PrivateDirs::reset`]) — or removed, if they
//! cannot be — and a configuration keeps a few emptied ones, with the
//! Landlock domain built for them, for its next commands
//! ([`PrivateDirsPool`]), because making and removing directories is the
//! dearest part of a command's start on a file system that discards freed
//! blocks.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::write_ruleset::WriteRuleset;

/// Name prefix of the directories (`quirl-lua-command-<pid>-<n>-<nonce>`).
const PREFIX: &str = "quirl-lua-command-";

/// One command's private directories, removed on drop.
#[derive(Debug)]
pub(crate) struct PrivateDirs {
    root: PathBuf,
    home: PathBuf,
    tmp: PathBuf,
    removed: bool,
}

impl PrivateDirs {
    /// Make the directories (mode 0700) under `std::env::temp_dir()`.
    /// `mkdir` fails on an existing name, so nothing can be planted there
    /// in advance.
    pub(crate) fn create() -> io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        let number = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut builder = std::fs::DirBuilder::new();
        builder.mode(0o700);
        // A nonce makes the name unpredictable for other users of the
        // temporary directory; a collision (or a planted name) is retried.
        let mut last = None;
        for _ in 0..8 {
            let root = base.join(format!(
                "{PREFIX}{}-{number}-{:016x}",
                std::process::id(),
                nonce()
            ));
            match builder.create(&root) {
                Ok(()) => {
                    let dirs = Self {
                        home: root.join("home"),
                        tmp: root.join("tmp"),
                        root,
                        removed: false,
                    };
                    builder.create(&dirs.home)?;
                    builder.create(&dirs.tmp)?;
                    return Ok(dirs);
                }
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => last = Some(error),
                Err(error) => return Err(error),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free name for a private directory")))
    }

    /// The directory holding both (the command's writable private area).
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The private `HOME`.
    pub(crate) fn home(&self) -> &Path {
        &self.home
    }

    /// The private `TMPDIR`.
    pub(crate) fn tmp(&self) -> &Path {
        &self.tmp
    }

    /// Empty the directories for the next command: remove everything in
    /// `home/` and `tmp/`, and anything else in the root (a command may
    /// have replaced `home` by a link, or added files beside it). Returns
    /// whether the directories are as [`Self::create`] made them; `false`
    /// means this value must not be used again (drop it: it is removed).
    /// Nothing is followed out of the tree (`DirEntry::file_type` does not
    /// follow links, `remove_dir_all` neither).
    pub(crate) fn reset(&self) -> bool {
        if self.removed {
            return false;
        }
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return false;
        };
        let mut found = 0;
        for entry in entries {
            let Ok(entry) = entry else { return false };
            let path = entry.path();
            let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
            if is_dir && (path == self.home || path == self.tmp) {
                if !empty(&path) {
                    return false;
                }
                found += 1;
            } else if remove_entry(&path, is_dir).is_err() {
                return false;
            }
        }
        use std::os::unix::fs::MetadataExt;
        // Both there, still private.
        found == 2
            && [&self.root, &self.home, &self.tmp].iter().all(|dir| {
                std::fs::symlink_metadata(dir)
                    .is_ok_and(|meta| meta.is_dir() && meta.mode() & 0o777 == 0o700)
            })
    }

    /// Remove everything (idempotent). A command may have left directories
    /// without permissions; they are made accessible and removal is tried
    /// again. Returns what could not be removed, as a sentence.
    pub(crate) fn remove(&mut self) -> Option<String> {
        if self.removed {
            return None;
        }
        self.removed = true;
        // `remove_dir_all` never follows a symbolic link out of the tree.
        if std::fs::remove_dir_all(&self.root).is_ok() {
            return None;
        }
        make_accessible(&self.root);
        match std::fs::remove_dir_all(&self.root) {
            Ok(()) => None,
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(error) => Some(format!(
                "the private directory {} could not be removed: {error}",
                self.root.display()
            )),
        }
    }
}

impl Drop for PrivateDirs {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// Remove everything in `dir` (not following links); whether it is empty.
fn empty(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    for entry in entries {
        let Ok(entry) = entry else { return false };
        let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
        if remove_entry(&entry.path(), is_dir).is_err() {
            return false;
        }
    }
    true
}

fn remove_entry(path: &Path, is_dir: bool) -> io::Result<()> {
    if !is_dir {
        return std::fs::remove_file(path);
    }
    if std::fs::remove_dir_all(path).is_ok() {
        return Ok(());
    }
    make_accessible(path);
    std::fs::remove_dir_all(path)
}

/// How many emptied directories a configuration keeps.
const IDLE_MAX: usize = 8;

/// One command's directories and the Landlock write domain built for them
/// (with the writable roots it was built for).
#[derive(Debug)]
pub(crate) struct PooledDirs {
    pub(crate) dirs: PrivateDirs,
    writes: Option<(Vec<PathBuf>, WriteRuleset)>,
}

impl PooledDirs {
    /// The write domain for `roots` (the configuration's writable roots)
    /// and these directories: the one built last time for the same roots,
    /// or a new one.
    pub(crate) fn writes(&mut self, roots: &[&Path]) -> Result<&WriteRuleset, String> {
        let same = self.writes.as_ref().is_some_and(|(built, _)| {
            built.len() == roots.len() && built.iter().zip(roots).all(|(a, b)| a == b)
        });
        if !same {
            let ruleset = WriteRuleset::build(
                roots
                    .iter()
                    .copied()
                    .chain(std::iter::once(self.dirs.root())),
            )?;
            self.writes = Some((
                roots.iter().map(|root| root.to_path_buf()).collect(),
                ruleset,
            ));
        }
        self.writes
            .as_ref()
            .map(|(_, ruleset)| ruleset)
            .ok_or_else(|| "no Landlock write domain".to_owned())
    }
}

/// The emptied directories of one process-host configuration, shared by
/// its clones; each is removed when it leaves the pool for good.
#[derive(Clone, Default)]
pub(crate) struct PrivateDirsPool {
    idle: Arc<Mutex<Vec<PooledDirs>>>,
}

impl PrivateDirsPool {
    /// An emptied directory of an earlier command, or a new one.
    pub(crate) fn take(&self) -> io::Result<PooledDirs> {
        if let Some(dirs) = self.lock().pop() {
            return Ok(dirs);
        }
        Ok(PooledDirs {
            dirs: PrivateDirs::create()?,
            writes: None,
        })
    }

    /// After a command: keep its directories for the next one if they
    /// could be emptied, else remove them. A problem, as a sentence.
    pub(crate) fn give_back(&self, mut dirs: PooledDirs) -> Option<String> {
        if dirs.dirs.reset() {
            let mut idle = self.lock();
            if idle.len() < IDLE_MAX {
                idle.push(dirs);
                return None;
            }
        }
        dirs.dirs.remove()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<PooledDirs>> {
        // A panic while the lock was held left at worst a shorter list.
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many are kept (tests).
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.lock().len()
    }
}

impl std::fmt::Debug for PrivateDirsPool {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("PrivateDirsPool")
            .field("idle", &self.lock().len())
            .finish()
    }
}

/// A pool does not make two configurations different.
impl PartialEq for PrivateDirsPool {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for PrivateDirsPool {}

/// Give every directory below `dir` (not following symbolic links) owner
/// read, write and search permission, so that it can be emptied.
fn make_accessible(dir: &Path) {
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            make_accessible(&entry.path());
        }
    }
}

/// 64 unpredictable bits (the kernel's random source; the clock if that
/// fails, which still differs per call).
fn nonce() -> u64 {
    let mut bytes = [0_u8; 8];
    if rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()).is_ok() {
        return u64::from_ne_bytes(bytes);
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_directories_are_private_empty_and_removed_with_what_they_hold() {
        use std::os::unix::fs::MetadataExt;
        let mut dirs = PrivateDirs::create().unwrap();
        for dir in [dirs.root(), dirs.home(), dirs.tmp()] {
            let metadata = std::fs::metadata(dir).unwrap();
            assert!(metadata.is_dir());
            assert_eq!(metadata.mode() & 0o777, 0o700, "{}", dir.display());
        }
        assert_eq!(std::fs::read_dir(dirs.home()).unwrap().count(), 0);
        let other = PrivateDirs::create().unwrap();
        assert_ne!(other.root(), dirs.root());
        // What a command may leave: files, a locked directory, a link out.
        std::fs::write(dirs.home().join(".gitconfig"), "x").unwrap();
        let locked = dirs.tmp().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::write(locked.join("f"), "x").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o0)).unwrap();
        std::os::unix::fs::symlink("/", dirs.tmp().join("root")).unwrap();
        let root = dirs.root().to_path_buf();
        assert_eq!(dirs.remove(), None);
        assert!(!root.exists());
        assert!(Path::new("/").exists());
        assert_eq!(dirs.remove(), None, "idempotent");
        let other_root = other.root().to_path_buf();
        drop(other);
        assert!(!other_root.exists());
    }

    #[test]
    fn a_pooled_directory_comes_back_empty_or_not_at_all() {
        let pool = PrivateDirsPool::default();
        let first = pool.take().unwrap();
        let root = first.dirs.root().to_path_buf();
        // What a command may leave: files in both, a link in place of
        // `home`'s contents, something beside them, a locked directory.
        std::fs::write(first.dirs.home().join(".gitconfig"), "x").unwrap();
        std::fs::write(root.join("beside"), "x").unwrap();
        let locked = first.dirs.tmp().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::write(locked.join("f"), "x").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o0)).unwrap();
        std::os::unix::fs::symlink("/", first.dirs.tmp().join("root")).unwrap();
        assert_eq!(pool.give_back(first), None);
        assert_eq!(pool.idle(), 1);
        let again = pool.take().unwrap();
        assert_eq!(again.dirs.root(), root, "reused");
        assert_eq!(std::fs::read_dir(again.dirs.home()).unwrap().count(), 0);
        assert_eq!(std::fs::read_dir(again.dirs.tmp()).unwrap().count(), 0);
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 2);
        assert!(Path::new("/").exists());
        // `home` replaced by a link out: not reused, removed.
        std::fs::remove_dir(again.dirs.home()).unwrap();
        std::os::unix::fs::symlink("/etc", again.dirs.home()).unwrap();
        assert_eq!(pool.give_back(again), None);
        assert_eq!(pool.idle(), 0);
        assert!(!root.exists());
        assert!(Path::new("/etc/passwd").exists());
    }
}
