//! A host command's private directories (DESIGN §16.8): a fresh, empty
//! directory made for one command under the parent's temporary directory,
//! with `home/` (the command's `HOME` unless the embedder declares another)
//! and `tmp/` (its `TMPDIR`) inside. The command may write there and beneath
//! its working directory, nowhere else (module `write_ruleset`). Everything
//! is removed when the command has ended, so nothing it wrote there reaches
//! a later command.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

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
}
