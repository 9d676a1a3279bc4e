//! The Landlock ruleset of a host command (SPEC §16.6 "Execute ruleset"):
//! the child may execute only the granted program's resolved file and what
//! the kernel needs to start it — the ELF interpreter its `PT_INTERP`
//! names, or for a `#!` script the interpreter its first line names (and,
//! in turn, that file's own interpreter).
//!
//! Only the execute right is handled (`LANDLOCK_ACCESS_FS_EXECUTE`), so
//! every other file access stays as it was: a granted program reads and
//! writes what the parent's user may. Landlock domains are inherited by
//! every descendant and cannot be left, so nothing the program starts can
//! execute another file either.
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
use std::sync::OnceLock;

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
    match kernel_abi() {
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

/// The kernel's Landlock ABI version, or why there is none (SPEC §16.6).
///
/// The same query as the reference worker's own (`quirl_lua_reference_worker::
/// lockdown::landlock::kernel_abi`, SPEC §18.3), kept here so that the
/// supervisor library does not link the worker (and Lua) for one system
/// call; both word their answers alike.
fn kernel_abi() -> Result<i32, &'static str> {
    // SAFETY: `landlock_create_ruleset(NULL, 0,
    // LANDLOCK_CREATE_RULESET_VERSION)` is the documented read-only query of
    // the ABI version: no memory is read or written and no descriptor is
    // created. The landlock crate keeps its own query private.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0_usize,
            1_u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    if version > 0 {
        return i32::try_from(version).map_err(|_| "the Landlock ABI version is out of range");
    }
    Err(match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EOPNOTSUPP) => "Landlock is built into the kernel but not enabled",
        Some(libc::ENOSYS) => "the kernel has no Landlock (Linux 5.13 or later)",
        _ => "the Landlock query failed",
    })
}

/// A prepared execute ruleset: the Landlock descriptor, and the files it
/// allows to be executed (for error contexts and tests).
#[derive(Debug)]
pub(crate) struct ExecRuleset {
    fd: OwnedFd,
    files: Vec<PathBuf>,
}

impl ExecRuleset {
    /// The ruleset for running `program` (the resolved path that will be
    /// given to `execve`); `cwd` resolves a relative `#!` interpreter as
    /// the kernel would, from the child's working directory.
    pub(crate) fn for_program(program: &Path, cwd: &Path) -> Result<Self, String> {
        let files = exec_chain(program, cwd)?;
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::Execute)
            .and_then(|ruleset| ruleset.create())
            .map_err(|error| format!("creating the Landlock ruleset failed: {error}"))?;
        for file in &files {
            let opened = PathFd::new(file)
                .map_err(|error| format!("opening `{}` failed: {error}", file.display()))?;
            ruleset = ruleset
                .add_rule(PathBeneath::new(opened, AccessFs::Execute))
                .map_err(|error| {
                    format!("adding `{}` to the ruleset failed: {error}", file.display())
                })?;
        }
        let fd: Option<OwnedFd> = ruleset.into();
        let fd = fd.ok_or_else(|| "the kernel gave no Landlock ruleset".to_owned())?;
        Ok(Self { fd, files })
    }

    /// The descriptor the child restricts itself with.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The files the ruleset allows to be executed, program first.
    pub(crate) fn files(&self) -> &[PathBuf] {
        &self.files
    }
}

/// `landlock_restrict_self(ruleset, 0)`: runs in the forked child after
/// `no_new_privs` is set (SPEC §16.6). One system call, no allocation.
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

/// The files the kernel executes to start `program`: the program, then
/// each interpreter it names (ELF `PT_INTERP`, `#!`), canonical and
/// without duplicates.
pub(crate) fn exec_chain(program: &Path, cwd: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut next = Some(program.to_path_buf());
    while let Some(path) = next.take() {
        let path = if path.is_absolute() {
            path
        } else {
            cwd.join(path)
        };
        let canonical = std::fs::canonicalize(&path)
            .map_err(|error| format!("resolving `{}` failed: {error}", path.display()))?;
        if files.contains(&canonical) {
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
        files.push(canonical);
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
        return Ok(shebang_interpreter(line));
    }
    if head.starts_with(b"\x7fELF") {
        return elf_interpreter(&mut file, head);
    }
    Ok(None)
}

/// The interpreter word of a `#!` line (after the `#!`), as the kernel
/// splits it: leading blanks skipped, up to the next blank or newline.
fn shebang_interpreter(line: &[u8]) -> Option<PathBuf> {
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
            shebang_interpreter(b" \t/usr/bin/env python3\nx"),
            Some(PathBuf::from("/usr/bin/env"))
        );
        assert_eq!(shebang_interpreter(b"   \n/bin/sh"), None);
    }

    #[test]
    fn the_probe_matches_what_the_crate_can_handle() {
        let support = landlock_support();
        if let Some(abi) = support.abi {
            assert!(abi >= 1);
            assert!(support.unavailable.is_none());
            let ruleset = ExecRuleset::for_program(Path::new("/bin/true"), Path::new("/")).unwrap();
            assert!(ruleset.raw_fd() > 2);
            assert_eq!(ruleset.files().len(), 2);
        } else {
            assert!(support.unavailable.is_some());
            assert!(support.summary().contains("program list only"));
        }
    }
}
