//! Programs judged by what they are, not by the name a grant spells
//! (DESIGN §16.2 "Identity"). A refused program is still refused when it
//! is reached under another name: a symbolic link (`x86_64` → `setarch`),
//! a Debian alternative (`editor` → `/etc/alternatives/editor` →
//! `vim.basic`), a hard link or a versioned name (`perl5.36.0`), a copy
//! (same size and bytes), or a script whose `#!` line names one
//! (`prove` → `perl`, `pydoc3` → `python3.11`, `#!/usr/bin/env …` → `env`).
//!
//! The list of refused programs ([`super::PROGRAMMING_ENVIRONMENTS`]) is
//! turned into the set of *files* it names: every entry of the standard
//! program directories and of the granted `PATH` whose name the list
//! matches (by final component, a version or `.suffix` ignored), followed
//! through its links to the file it is, kept as (device, inode) with its
//! size. A granted program is then refused when
//!
//! - a name on its way — the grant's word, each link it passes, the file it
//!   finally is — matches the list, or
//! - the file it is has the identity of a listed file, or the same size
//!   and bytes as one, or
//! - the interpreter of its `#!` chain is refused by these same rules.
//!
//! The ELF interpreter (`PT_INTERP`, the dynamic loader every dynamic
//! program names) is not judged here: the exec guard refuses running it a
//! second time. What this module does not see: a program that is a
//! programming environment without sharing a name, a file or bytes with a
//! listed one (a fresh build of an interpreter under another name), and
//! interpreters the kernel picks by `binfmt_misc` registration.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::wrappers::is_programming_environment;

/// Directories searched for the files of the list besides the granted
/// `PATH` (where distributions install programs).
const STANDARD_DIRS: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// Links followed from one name before giving up (the kernel's own limit).
const LINKS_MAX: usize = 40;

/// A file's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Identity {
    device: u64,
    inode: u64,
}

/// A listed program's file: its identity, size and one name it was found by.
#[derive(Clone, Debug)]
struct Refused {
    identity: Identity,
    size: u64,
    path: PathBuf,
}

/// What one directory holds of the list, with the directory's
/// modification time when it was read (a change means a new read).
#[derive(Clone, Debug)]
struct DirScan {
    modified: (i64, i64),
    refused: Vec<Refused>,
}

fn scans() -> &'static Mutex<HashMap<PathBuf, DirScan>> {
    static SCANS: OnceLock<Mutex<HashMap<PathBuf, DirScan>>> = OnceLock::new();
    SCANS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The listed files in `dir`, read again when the directory changed.
fn refused_in(dir: &Path) -> Vec<Refused> {
    let Ok(metadata) = std::fs::metadata(dir) else {
        return Vec::new();
    };
    let modified = (metadata.mtime(), metadata.mtime_nsec());
    let mut scans = scans()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(scan) = scans.get(dir)
        && scan.modified == modified
    {
        return scan.refused.clone();
    }
    let mut refused = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !is_programming_environment(name) {
                continue;
            }
            let path = entry.path();
            if let Ok(target) = std::fs::metadata(&path)
                && target.is_file()
            {
                refused.push(Refused {
                    identity: Identity {
                        device: target.dev(),
                        inode: target.ino(),
                    },
                    size: target.len(),
                    path,
                });
            }
        }
    }
    scans.insert(
        dir.to_path_buf(),
        DirScan {
            modified,
            refused: refused.clone(),
        },
    );
    refused
}

/// Every listed file of the standard directories and of `search` (the
/// granted `PATH`'s absolute directories).
fn refused_files(search: &[PathBuf]) -> Vec<Refused> {
    let mut all: Vec<Refused> = Vec::new();
    let standard = STANDARD_DIRS.iter().map(PathBuf::from);
    for dir in standard.chain(search.iter().cloned()) {
        for file in refused_in(&dir) {
            if !all.iter().any(|known| known.identity == file.identity) {
                all.push(file);
            }
        }
    }
    all
}

/// Why `path` (a program about to be granted or run, as named) is a
/// programming environment, or `None`. `word` is the program word of the
/// grant or command; `search` the granted `PATH`'s directories.
pub(crate) fn refusal(word: &str, path: &Path, search: &[PathBuf]) -> Option<String> {
    if is_programming_environment(word) {
        return Some(format!(
            "`{word}` is on the list of programming environments"
        ));
    }
    let refused = refused_files(search);
    judge(path, &refused, 0)
}

/// `path` judged by its names, its file and its `#!` interpreter.
fn judge(path: &Path, refused: &[Refused], depth: usize) -> Option<String> {
    for name in names_on_the_way(path) {
        if is_programming_environment(&name) {
            return Some(format!(
                "`{}` leads to `{name}`, a programming environment",
                path.display()
            ));
        }
    }
    let metadata = std::fs::metadata(path).ok()?;
    let identity = Identity {
        device: metadata.dev(),
        inode: metadata.ino(),
    };
    if let Some(file) = refused.iter().find(|file| file.identity == identity) {
        return Some(format!(
            "`{}` is the same file as `{}`, a programming environment",
            path.display(),
            file.path.display()
        ));
    }
    for file in refused.iter().filter(|file| file.size == metadata.len()) {
        if same_bytes(path, &file.path).unwrap_or(false) {
            return Some(format!(
                "`{}` is a copy of `{}`, a programming environment",
                path.display(),
                file.path.display()
            ));
        }
    }
    if depth < 4
        && let Ok(Some(interpreter)) = shebang_interpreter(path)
    {
        let interpreter = if interpreter.is_absolute() {
            interpreter
        } else {
            // A relative interpreter: judged where the script lives (the
            // kernel resolves it from the working directory; the chain of
            // the execute ruleset follows that one).
            path.parent().unwrap_or(Path::new("/")).join(interpreter)
        };
        if let Some(why) = judge(&interpreter, refused, depth + 1) {
            return Some(format!(
                "`{}` is a script run by `{}`: {why}",
                path.display(),
                interpreter.display()
            ));
        }
    }
    None
}

/// The final component of `path`, of every link it passes through, and of
/// the file it resolves to.
fn names_on_the_way(path: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let push = |names: &mut Vec<String>, path: &Path| {
        if let Some(name) = path.file_name().and_then(|name| name.to_str()) {
            names.push(name.to_owned());
        }
    };
    push(&mut names, path);
    let mut current = path.to_path_buf();
    for _ in 0..LINKS_MAX {
        let Ok(target) = std::fs::read_link(&current) else {
            break;
        };
        current = if target.is_absolute() {
            target
        } else {
            current.parent().unwrap_or(Path::new("/")).join(target)
        };
        push(&mut names, &current);
    }
    if let Ok(canonical) = std::fs::canonicalize(path) {
        push(&mut names, &canonical);
    }
    names
}

/// Whether two files of the same size hold the same bytes.
fn same_bytes(left: &Path, right: &Path) -> io::Result<bool> {
    let mut left = File::open(left)?;
    let mut right = File::open(right)?;
    let mut a = vec![0_u8; 64 * 1024];
    let mut b = vec![0_u8; 64 * 1024];
    loop {
        let count = read_full(&mut left, &mut a)?;
        let other = read_full(&mut right, &mut b)?;
        if count != other || a[..count] != b[..count] {
            return Ok(false);
        }
        if count == 0 {
            return Ok(true);
        }
    }
}

fn read_full(file: &mut File, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..])? {
            0 => break,
            count => filled += count,
        }
    }
    Ok(filled)
}

/// The interpreter a `#!` line names (the first word after `#!`).
fn shebang_interpreter(path: &Path) -> io::Result<Option<PathBuf>> {
    let mut head = [0_u8; 256];
    let count = read_full(&mut File::open(path)?, &mut head)?;
    let Some(line) = head[..count].strip_prefix(b"#!") else {
        return Ok(None);
    };
    Ok(super::exec_ruleset::shebang_word(line))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("quirl-identity-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_link_to_a_listed_program_is_refused_under_any_name() {
        let dir = scratch("links");
        // Like Debian's alternatives: two hops, harmless names.
        std::os::unix::fs::symlink("/bin/sh", dir.join("alternative")).unwrap();
        std::os::unix::fs::symlink(dir.join("alternative"), dir.join("helper")).unwrap();
        let why = refusal("helper", &dir.join("helper"), &[]).unwrap();
        assert!(why.contains("programming environment"), "{why}");
        // An ordinary program is not.
        std::os::unix::fs::symlink("/bin/true", dir.join("fine")).unwrap();
        assert_eq!(refusal("fine", &dir.join("fine"), &[]), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_copy_of_a_listed_program_is_refused() {
        let dir = scratch("copy");
        let shell = std::fs::canonicalize("/bin/sh").unwrap();
        std::fs::copy(&shell, dir.join("tool")).unwrap();
        let why = refusal("tool", &dir.join("tool"), &[]).unwrap();
        assert!(why.contains("copy of"), "{why}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_script_of_a_listed_interpreter_is_refused() {
        let dir = scratch("script");
        std::fs::write(dir.join("tool"), "#!/bin/sh\necho hi\n").unwrap();
        let why = refusal("tool", &dir.join("tool"), &[]).unwrap();
        assert!(why.contains("script run by `/bin/sh`"), "{why}");
        std::fs::write(dir.join("env-tool"), "#!/usr/bin/env true\n").unwrap();
        assert!(refusal("env-tool", &dir.join("env-tool"), &[]).is_some());
        std::fs::write(dir.join("plain"), "#!/bin/true\n").unwrap();
        assert_eq!(refusal("plain", &dir.join("plain"), &[]), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
