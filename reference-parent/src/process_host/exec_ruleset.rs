//! The Landlock execute ruleset of a host command granted by name (DESIGN
//! §16.6 "Execute ruleset"): the child may execute only the granted
//! program's resolved file and what the kernel needs to start it — the ELF
//! interpreter its `PT_INTERP` names, or for a `#!` script the interpreter
//! its first line names (and, in turn, that file's own interpreter). It is
//! the second line of defence behind the exec guard (`exec_guard`), which
//! lets no second exec happen at all; this ruleset limits even the one
//! exec to the program's own chain.
//!
//! Only the execute right is handled (`LANDLOCK_ACCESS_FS_EXECUTE`); writes
//! are confined by the command's other layer (`write_ruleset`). Landlock
//! domains are inherited by every descendant and cannot be left.
//!
//! The same resolution gives the program's identity verdict
//! (`program_identity`): the chain is resolved once, and both the ruleset
//! and the verdict are cached with it, where the kernel has no Landlock
//! too.
//!
//! The ruleset is built in the parent, before the fork (opening the files,
//! `landlock_create_ruleset`, one `landlock_add_rule` per file); the forked
//! child only calls `landlock_restrict_self` on the prepared descriptor
//! ([`restrict_in_child`]), which allocates nothing.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use landlock::{
    AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr,
};
use serde::Serialize;

/// The kernel's limit on nested interpreters (`#!` lines and `binfmt`
/// rewrites: Linux `BINPRM_MAX_RECURSION` is 4), plus the program itself.
const EXEC_CHAIN_MAX: usize = 5;

/// How many bytes of a `#!` line the kernel reads (`BINPRM_BUF_SIZE`).
const SHEBANG_BYTES_MAX: usize = 256;

/// Largest `PT_INTERP` path read (Linux refuses more than `PATH_MAX`).
const INTERP_BYTES_MAX: u64 = 4096;

/// Whether this kernel enforces Landlock, as the process host sees it
/// (`quirl-lua --version --verbose`, `stats`, error contexts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LandlockSupport {
    /// The kernel's Landlock ABI version, when Landlock is enabled.
    pub abi: Option<i32>,
    /// Why Landlock is not in use (`None` when it is).
    pub unavailable: Option<String>,
}

impl LandlockSupport {
    /// Whether host commands run under an execute ruleset.
    pub fn available(&self) -> bool {
        self.abi.is_some()
    }

    /// One line, e.g. `Landlock ABI 7: a granted program executes only itself`.
    pub fn summary(&self) -> String {
        match (self.abi, &self.unavailable) {
            (Some(abi), _) => format!(
                "Landlock ABI {abi}: a granted program executes only its own file and its interpreter"
            ),
            (None, why) => format!(
                "no Landlock ({}): grants are checked against the program list only",
                why.as_deref().unwrap_or("unavailable")
            ),
        }
    }
}

/// Landlock support of the running kernel, probed once per process.
pub fn landlock_support() -> &'static LandlockSupport {
    static SUPPORT: OnceLock<LandlockSupport> = OnceLock::new();
    SUPPORT.get_or_init(probe)
}

fn probe() -> LandlockSupport {
    match super::landlock_abi::kernel_abi() {
        Ok(abi) => LandlockSupport {
            abi: Some(abi),
            unavailable: None,
        },
        Err(why) => LandlockSupport {
            abi: None,
            unavailable: Some(why.to_owned()),
        },
    }
}

/// A resolved program: the Landlock descriptor of its execute ruleset
/// (where the kernel has Landlock), the files it allows to be executed (for
/// error contexts and tests), why the program is refused as a programming
/// environment (`program_identity`), and what each of those files was when
/// this was built ([`RulesetCache`]).
#[derive(Debug)]
pub(crate) struct ExecRuleset {
    fd: Option<OwnedFd>,
    files: Vec<PathBuf>,
    program: PathBuf,
    cwd: PathBuf,
    stamps: Vec<FileStamp>,
    refusal: Option<String>,
}

impl ExecRuleset {
    /// The ruleset for running `program` (the resolved path that will be
    /// given to `execve`); `cwd` resolves a relative `#!` interpreter as
    /// the kernel would, from the child's working directory. `word` is the
    /// program word and `search` the granted `PATH`'s directories, for the
    /// identity verdict.
    #[cfg(test)]
    pub(crate) fn for_program(program: &Path, cwd: &Path) -> Result<Self, String> {
        Self::resolve(program, cwd, None)
    }

    fn resolve(
        program: &Path,
        cwd: &Path,
        judged: Option<(&str, &[PathBuf])>,
    ) -> Result<Self, String> {
        let chain = exec_chain_stamped(program, cwd)?;
        let refusal = judged
            .and_then(|(word, search)| super::program_identity::refusal(word, program, search));
        let fd = if landlock_support().available() {
            Some(Self::build_ruleset(&chain)?)
        } else {
            None
        };
        let (files, stamps) = chain.into_iter().unzip();
        Ok(Self {
            fd,
            files,
            program: program.to_path_buf(),
            cwd: cwd.to_path_buf(),
            stamps,
            refusal,
        })
    }

    fn build_ruleset(chain: &[(PathBuf, FileStamp)]) -> Result<OwnedFd, String> {
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::Execute)
            .and_then(|ruleset| ruleset.create())
            .map_err(|error| format!("creating the Landlock ruleset failed: {error}"))?;
        for (file, _) in chain {
            let opened = PathFd::new(file)
                .map_err(|error| format!("opening `{}` failed: {error}", file.display()))?;
            ruleset = ruleset
                .add_rule(PathBeneath::new(opened, AccessFs::Execute))
                .map_err(|error| {
                    format!("adding `{}` to the ruleset failed: {error}", file.display())
                })?;
        }
        let fd: Option<OwnedFd> = ruleset.into();
        fd.ok_or_else(|| "the kernel gave no Landlock ruleset".to_owned())
    }

    /// The descriptor the child restricts itself with, where the kernel
    /// has Landlock.
    pub(crate) fn raw_fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Why the program is refused as a programming environment, if it is.
    pub(crate) fn refusal(&self) -> Option<&str> {
        self.refusal.as_deref()
    }

    /// The files the ruleset allows to be executed, program first.
    pub(crate) fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Whether this ruleset is still the one [`Self::for_program`] would
    /// build for `program` in `cwd`: every name of the chain still names
    /// the same file, unchanged (same device, inode, size, modification and
    /// status-change times: a replacement of any of them, a symbolic link
    /// pointed elsewhere, a rewrite, a `chmod`, means a new build). A
    /// rewrite in place within one tick of the file system's clock could go
    /// unseen; that fails closed — the ruleset still allows only files the
    /// granted program's chain had, so at worst a changed interpreter line
    /// gets `EACCES` until the next change.
    fn is_current_for(&self, program: &Path, cwd: &Path) -> bool {
        self.program == program
            && self.cwd == cwd
            && self
                .stamps
                .iter()
                .all(|stamp| FileStamp::of(&stamp.named).is_ok_and(|now| now == *stamp))
    }
}

/// A file of an exec chain as the kernel finds it: the name it is reached
/// by (followed like `execve` follows it), and its identity and
/// status-change time then.
#[derive(Debug, PartialEq, Eq)]
struct FileStamp {
    named: PathBuf,
    device: u64,
    inode: u64,
    changed: (i64, i64),
    modified: (i64, i64),
    len: u64,
}

impl FileStamp {
    fn of(named: &Path) -> io::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let metadata = std::fs::metadata(named)?;
        Ok(Self {
            named: named.to_path_buf(),
            device: metadata.dev(),
            inode: metadata.ino(),
            changed: (metadata.ctime(), metadata.ctime_nsec()),
            modified: (metadata.mtime(), metadata.mtime_nsec()),
            len: metadata.len(),
        })
    }
}

/// How many programs' rulesets a [`RulesetCache`] keeps (a configuration
/// grants a handful of programs; past this, the oldest goes).
const CACHED_RULESETS_MAX: usize = 32;

/// The execute rulesets one process-host configuration has built, kept for
/// its next commands (DESIGN §16.6): a command of a program already run
/// checks its chain's files with one `stat` each instead of rebuilding the
/// ruleset (resolving and reading them, creating the ruleset, opening and
/// adding each file). Shared by a configuration's clones; each descriptor
/// is closed when the last configuration and command holding it are done.
#[derive(Clone, Default)]
pub(crate) struct RulesetCache {
    entries: Arc<Mutex<Vec<Arc<ExecRuleset>>>>,
}

impl RulesetCache {
    /// The ruleset for `program` in `cwd`: the cached one while it is
    /// current, else a new build, which replaces it.
    #[cfg(test)]
    pub(crate) fn for_program(
        &self,
        program: &Path,
        cwd: &Path,
    ) -> Result<Arc<ExecRuleset>, String> {
        self.for_command(program, cwd, "", &[])
    }

    /// [`Self::for_program`] with the identity verdict of the program word
    /// `word` on the directories `search`.
    pub(crate) fn for_command(
        &self,
        program: &Path,
        cwd: &Path,
        word: &str,
        search: &[PathBuf],
    ) -> Result<Arc<ExecRuleset>, String> {
        let cached = self
            .lock()
            .iter()
            .find(|entry| entry.program == program && entry.cwd == cwd)
            .cloned();
        if let Some(cached) = cached
            && cached.is_current_for(program, cwd)
        {
            return Ok(cached);
        }
        let built = Arc::new(ExecRuleset::resolve(program, cwd, Some((word, search)))?);
        let mut entries = self.lock();
        entries.retain(|entry| !(entry.program == program && entry.cwd == cwd));
        if entries.len() >= CACHED_RULESETS_MAX {
            entries.remove(0);
        }
        entries.push(Arc::clone(&built));
        Ok(built)
    }

    /// How many rulesets are kept (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<ExecRuleset>>> {
        // A panic while the lock was held left at worst a shorter list.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl std::fmt::Debug for RulesetCache {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RulesetCache")
            .field("rulesets", &self.lock().len())
            .finish()
    }
}

/// A cache does not make two configurations different.
impl PartialEq for RulesetCache {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for RulesetCache {}

/// `landlock_restrict_self(ruleset, 0)`: runs in the forked child after
/// `no_new_privs` is set (DESIGN §16.6). One system call, no allocation.
pub(crate) fn restrict_in_child(ruleset: RawFd) -> io::Result<()> {
    // SAFETY: integer arguments only; the descriptor was prepared by the
    // parent before the fork and is open in this child (close-on-exec). The
    // landlock crate's `restrict_self` consumes its ruleset value, which the
    // `pre_exec` closure (called by reference) cannot give up.
    let done = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0_u32) };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The files of [`exec_chain_stamped`] alone.
#[cfg(test)]
pub(crate) fn exec_chain(program: &Path, cwd: &Path) -> Result<Vec<PathBuf>, String> {
    Ok(exec_chain_stamped(program, cwd)?
        .into_iter()
        .map(|(file, _)| file)
        .collect())
}

/// The files the kernel executes to start `program` (the program, then
/// each interpreter it names: ELF `PT_INTERP`, `#!`), canonical and without
/// duplicates, each with its [`FileStamp`] (taken before the file is read,
/// so a change while it is read shows at the next check).
fn exec_chain_stamped(program: &Path, cwd: &Path) -> Result<Vec<(PathBuf, FileStamp)>, String> {
    let mut files: Vec<(PathBuf, FileStamp)> = Vec::new();
    let mut next = Some(program.to_path_buf());
    while let Some(path) = next.take() {
        let path = if path.is_absolute() {
            path
        } else {
            cwd.join(path)
        };
        let stamp = FileStamp::of(&path)
            .map_err(|error| format!("resolving `{}` failed: {error}", path.display()))?;
        let canonical = std::fs::canonicalize(&path)
            .map_err(|error| format!("resolving `{}` failed: {error}", path.display()))?;
        if files.iter().any(|(file, _)| *file == canonical) {
            break;
        }
        if files.len() == EXEC_CHAIN_MAX {
            return Err(format!(
                "`{}` names more than {} nested interpreters",
                program.display(),
                EXEC_CHAIN_MAX - 1
            ));
        }
        next = interpreter_of(&canonical)
            .map_err(|error| format!("reading `{}` failed: {error}", canonical.display()))?;
        files.push((canonical, stamp));
    }
    Ok(files)
}

/// The interpreter the kernel loads for `path`: `PT_INTERP` of an ELF
/// file, the first word after `#!` of a script; `None` for a static ELF
/// file or an unknown format (which `execve` then refuses itself).
fn interpreter_of(path: &Path) -> io::Result<Option<PathBuf>> {
    let mut file = File::open(path)?;
    let mut head = [0_u8; SHEBANG_BYTES_MAX];
    let mut filled = 0;
    while filled < head.len() {
        match file.read(&mut head[filled..])? {
            0 => break,
            count => filled += count,
        }
    }
    let head = &head[..filled];
    if let Some(line) = head.strip_prefix(b"#!") {
        return Ok(shebang_word(line));
    }
    if head.starts_with(b"\x7fELF") {
        return elf_interpreter(&mut file, head);
    }
    Ok(None)
}

/// The interpreter word of a `#!` line (after the `#!`), as the kernel
/// splits it: leading blanks skipped, up to the next blank or newline.
pub(crate) fn shebang_word(line: &[u8]) -> Option<PathBuf> {
    let line = line.split(|byte| *byte == b'\n').next().unwrap_or(line);
    let word = line
        .split(|byte| *byte == b' ' || *byte == b'\t')
        .find(|word| !word.is_empty())?;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(word)))
}

/// `PT_INTERP` of an ELF file whose first bytes are `head`.
fn elf_interpreter(file: &mut File, head: &[u8]) -> io::Result<Option<PathBuf>> {
    let invalid = || io::Error::new(io::ErrorKind::InvalidData, "malformed ELF header");
    let class64 = match head.get(4) {
        Some(1) => false,
        Some(2) => true,
        _ => return Err(invalid()),
    };
    let little = match head.get(5) {
        Some(1) => true,
        Some(2) => false,
        _ => return Err(invalid()),
    };
    let read = |bytes: &[u8], at: usize, len: usize| -> io::Result<u64> {
        let slice = bytes.get(at..at + len).ok_or_else(invalid)?;
        let mut value = 0_u64;
        for index in 0..len {
            let byte = if little {
                slice[len - 1 - index]
            } else {
                slice[index]
            };
            value = (value << 8) | u64::from(byte);
        }
        Ok(value)
    };
    let (phoff, phentsize, phnum) = if class64 {
        (read(head, 32, 8)?, read(head, 54, 2)?, read(head, 56, 2)?)
    } else {
        (read(head, 28, 4)?, read(head, 42, 2)?, read(head, 44, 2)?)
    };
    let entry_len = if class64 { 56 } else { 32 };
    if phentsize < entry_len || phnum > 4096 {
        return Err(invalid());
    }
    let entry_len = usize::try_from(entry_len).map_err(|_| invalid())?;
    let phentsize_usize = usize::try_from(phentsize).map_err(|_| invalid())?;
    let mut table = vec![0_u8; phentsize_usize * usize::try_from(phnum).map_err(|_| invalid())?];
    file.seek(SeekFrom::Start(phoff))?;
    file.read_exact(&mut table)?;
    for entry in table.chunks_exact(phentsize_usize) {
        let entry = &entry[..entry_len];
        if read(entry, 0, 4)? != 3 {
            continue; // not PT_INTERP
        }
        let (offset, size) = if class64 {
            (read(entry, 8, 8)?, read(entry, 32, 8)?)
        } else {
            (read(entry, 4, 4)?, read(entry, 16, 4)?)
        };
        if size == 0 || size > INTERP_BYTES_MAX {
            return Err(invalid());
        }
        let mut name = vec![0_u8; usize::try_from(size).map_err(|_| invalid())?];
        file.seek(SeekFrom::Start(offset))?;
        file.read_exact(&mut name)?;
        let end = name
            .iter()
            .position(|byte| *byte == 0)
            .unwrap_or(name.len());
        name.truncate(end);
        return Ok(Some(PathBuf::from(std::ffi::OsStr::from_bytes(&name))));
    }
    Ok(None)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_program_needs_its_elf_interpreter() {
        let chain = exec_chain(Path::new("/bin/true"), Path::new("/")).unwrap();
        assert_eq!(chain[0], std::fs::canonicalize("/bin/true").unwrap());
        // Debian's coreutils are dynamically linked: ld-linux is second.
        assert_eq!(chain.len(), 2, "{chain:?}");
        let loader = chain[1].file_name().unwrap().to_string_lossy().into_owned();
        assert!(loader.starts_with("ld-"), "{chain:?}");
    }

    #[test]
    fn a_script_needs_the_interpreter_its_line_names() {
        let dir = std::env::temp_dir().join(format!("quirl-exec-chain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("script");
        std::fs::write(&script, "#!  /bin/sh -e\necho hi\n").unwrap();
        let chain = exec_chain(&script, &dir).unwrap();
        assert_eq!(chain[0], std::fs::canonicalize(&script).unwrap());
        assert_eq!(chain[1], std::fs::canonicalize("/bin/sh").unwrap());
        // ... and the shell's own ELF interpreter.
        assert!(chain.len() >= 3, "{chain:?}");
        // A relative interpreter is found from the working directory.
        std::fs::write(&script, "#!script2\n").unwrap();
        std::fs::write(dir.join("script2"), "#!/bin/true\n").unwrap();
        let chain = exec_chain(&script, &dir).unwrap();
        assert_eq!(
            chain[1],
            std::fs::canonicalize(dir.join("script2")).unwrap()
        );
        // A loop of scripts ends (the kernel would refuse it with ELOOP).
        std::fs::write(dir.join("script2"), format!("#!{}\n", script.display())).unwrap();
        assert_eq!(exec_chain(&script, &dir).unwrap().len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn shebang_words_split_like_the_kernel() {
        assert_eq!(
            shebang_word(b" \t/usr/bin/env python3\nx"),
            Some(PathBuf::from("/usr/bin/env"))
        );
        assert_eq!(shebang_word(b"   \n/bin/sh"), None);
    }

    /// A scratch directory of its own for a test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("quirl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_cached_ruleset_is_reused_until_its_chain_changes() {
        let support = landlock_support();
        if !support.available() {
            crate::test_environment::skip(
                "landlock",
                "a_cached_ruleset_is_reused_until_its_chain_changes",
                &support.summary(),
            );
            return;
        }
        let dir = scratch("ruleset-cache");
        let script = dir.join("prog");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let cache = RulesetCache::default();
        let first = cache.for_program(&script, &dir).unwrap();
        assert_eq!(first.files()[1], std::fs::canonicalize("/bin/sh").unwrap());
        assert!(Arc::ptr_eq(
            &first,
            &cache.for_program(&script, &dir).unwrap()
        ));
        // Another working directory is another chain (a relative `#!`).
        let other = cache.for_program(&script, Path::new("/")).unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(cache.len(), 2);
        // Replaced, as an upgrade replaces a program (a new inode): rebuilt,
        // with the new interpreter, in place of the old entry.
        std::fs::write(dir.join("prog.new"), "#!/bin/true\n").unwrap();
        std::fs::rename(dir.join("prog.new"), &script).unwrap();
        let replaced = cache.for_program(&script, &dir).unwrap();
        assert!(!Arc::ptr_eq(&first, &replaced));
        assert_eq!(
            replaced.files()[1],
            std::fs::canonicalize("/bin/true").unwrap()
        );
        assert_eq!(cache.len(), 2);
        // Rewritten in place with another length: rebuilt.
        std::fs::write(&script, "#!/bin/sh -e\n").unwrap();
        let rewritten = cache.for_program(&script, &dir).unwrap();
        assert!(!Arc::ptr_eq(&replaced, &rewritten));
        assert_eq!(
            rewritten.files()[1],
            std::fs::canonicalize("/bin/sh").unwrap()
        );
        // A program reached through a symbolic link pointed elsewhere.
        let link = dir.join("link");
        std::os::unix::fs::symlink(&script, &link).unwrap();
        let linked = cache.for_program(&link, &dir).unwrap();
        assert_eq!(linked.files()[0], std::fs::canonicalize(&script).unwrap());
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("/bin/true", &link).unwrap();
        let relinked = cache.for_program(&link, &dir).unwrap();
        assert!(!Arc::ptr_eq(&linked, &relinked));
        assert_eq!(
            relinked.files()[0],
            std::fs::canonicalize("/bin/true").unwrap()
        );
        // A vanished program is an error, not a stale ruleset.
        std::fs::remove_file(&link).unwrap();
        assert!(cache.for_program(&link, &dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_cache_keeps_a_bounded_number_of_rulesets() {
        let support = landlock_support();
        if !support.available() {
            crate::test_environment::skip(
                "landlock",
                "the_cache_keeps_a_bounded_number_of_rulesets",
                &support.summary(),
            );
            return;
        }
        let dir = scratch("ruleset-cache-bound");
        let cache = RulesetCache::default();
        for index in 0..=CACHED_RULESETS_MAX {
            let script = dir.join(format!("prog{index}"));
            std::fs::write(&script, "#!/bin/true\n").unwrap();
            cache.for_program(&script, &dir).unwrap();
        }
        assert_eq!(cache.len(), CACHED_RULESETS_MAX);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_probe_matches_what_the_crate_can_handle() {
        let support = landlock_support();
        if let Some(abi) = support.abi {
            assert!(abi >= 1);
            assert!(support.unavailable.is_none());
            let ruleset = ExecRuleset::for_program(Path::new("/bin/true"), Path::new("/")).unwrap();
            assert!(ruleset.raw_fd().unwrap() > 2);
            assert_eq!(ruleset.files().len(), 2);
        } else {
            assert!(support.unavailable.is_some());
            assert!(support.summary().contains("program list only"));
        }
    }
}
