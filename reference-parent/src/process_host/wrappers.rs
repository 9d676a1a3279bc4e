//! The one list of programs that run another program chosen by their
//! arguments (DESIGN §16.2): granting one of them by name would grant every
//! program on `PATH`, so [`super::Grants`] refuses such a grant unless the
//! operator grants every program (`process.spawn`) on purpose.
//!
//! A program is on the list when a plain invocation, with arguments the
//! guest controls, can start an arbitrary program or run arbitrary code:
//! command wrappers (`env`, `nice`, `timeout`, `setsid`, …), privilege and
//! namespace tools (`sudo`, `unshare`, …), shells and interpreters (`-c`,
//! `-e`), multiplexers (`busybox`, `toybox`), and tools with a documented
//! "run this command" option (`find -exec`, `xargs`, `tar
//! --to-command`, `rsync -e`, `git -c core.pager=…`, `awk 'BEGIN{system()}'`,
//! GNU `sed` `e`, editors and pagers with `!`). The list cannot be complete
//! for every program an operator may install; DESIGN §16.2 says to grant only
//! programs that do not run other programs.

/// Programs that run their arguments as a command (compared by final path
/// component under each of its spellings: itself, without a trailing
/// version, before its first `.` and before its first digit): the rule where
/// the exec guard is unavailable. It is
/// [`PROGRAMMING_ENVIRONMENTS`] followed by [`COMMAND_OPTION_PROGRAMS`],
/// built from those two lists (each name is written once).
pub const COMMAND_RUNNING_PROGRAMS: &[&str] = &COMMAND_RUNNING_ARRAY;

const COMMAND_RUNNING_ARRAY: [&str;
    PROGRAMMING_ENVIRONMENTS.len() + COMMAND_OPTION_PROGRAMS.len()] =
    concat(PROGRAMMING_ENVIRONMENTS, COMMAND_OPTION_PROGRAMS);

/// `first` then `second`, in a constant.
const fn concat<const N: usize>(
    first: &[&'static str],
    second: &[&'static str],
) -> [&'static str; N] {
    let mut out = [""; N];
    let mut index = 0;
    while index < first.len() {
        out[index] = first[index];
        index += 1;
    }
    let mut index = 0;
    while index < second.len() {
        out[first.len() + index] = second[index];
        index += 1;
    }
    out
}

/// The programs of [`COMMAND_RUNNING_PROGRAMS`] that become grantable by
/// name under the exec guard (DESIGN §16.2): each starts another program
/// only by `execve`, which the guard refuses for everything after the
/// granted program's own exec — through a documented
/// option (`find -exec`, `tar --to-command`, `git -c core.pager=…`,
/// `sort --compress-program`, `gcc -wrapper`, `rsync -e`, `man`/`less`
/// pagers and `!`), a build rule (`make`, `ninja`), a dot command
/// (`sqlite3 .shell`), GNU `sed`'s `e` command, or under another name of
/// `setarch` (`x86_64 PROG`).
pub const COMMAND_OPTION_PROGRAMS: &[&str] = &[
    // setarch under its architecture names (`x86_64 PROG` runs PROG).
    "x86_64", "i386", "i686", "aarch64", "uname26",
    // Editors of text streams and build tools: a command or rule runs a
    // program.
    "sed", // GNU `e`
    "m4",  // syscmd, esyscmd
    "make", "gmake", "bmake", "cmake", "ninja",
    // Copying over a remote shell (`-e`, `-S`).
    "scp", "sftp", "rsync", // A documented option runs a command.
    "find", "tar", "zip", "git", "ed", "less", "more", "man", "most",
    // Found by review (issue 25): a documented option runs a program.
    "sort",    // --compress-program=PROG
    "gcc",     // -wrapper PROG,ARGS
    "cc",      // (gcc)
    "g++",     // (gcc)
    "c++",     // (gcc)
    "clang",   // -ccc-gcc-name, -fuse-ld=PATH
    "sqlite3", // .shell, .system
    "npx",     // runs any package's command
    "npm",     // npm exec, lifecycle scripts
];

/// The part of [`COMMAND_RUNNING_PROGRAMS`] that stays refused when every
/// host command granted by name runs under the exec guard (DESIGN §16.2): a
/// granted program is then the one program its tree executes, so what is
/// left is what needs no second program to run arbitrary code or commands —
///
/// - whole programming environments: shells, the multi-call binaries,
///   interpreters (`awk` and `expect` included), debuggers and editors with
///   an embedded language (`gdb`/`lldb` Python, Vim script, Emacs Lisp),
///   `nmap` (Lua scripts);
/// - launchers, whose only purpose is starting another program: with the
///   guard they could start nothing but would still be granted by a name
///   that suggests otherwise; the dynamic loader (`ld.so`, `ld-linux*`)
///   maps any program it is given without an `execve` of its own;
/// - programs that hand a command to a service running outside the
///   command's domain, which starts it unrestricted: `ssh`, `rsh`, `mosh`,
///   `at`/`batch`/`crontab`, `systemd-run`, `dbus-*`, `screen`/`tmux`
///   servers, container engines.
///
/// `git`, `sed`, `find`, `tar`, `zip`, `rsync`, `make`, `less`, `man` and
/// the other "documented option runs a command" tools
/// ([`COMMAND_OPTION_PROGRAMS`]) become grantable: the command their option
/// names is refused by the kernel. (`program_identity` also finds these
/// programs under other names, by the file they are.)
pub const PROGRAMMING_ENVIRONMENTS: &[&str] = &[
    // Launchers.
    "env",
    "nice",
    "nohup",
    "setsid",
    "timeout",
    "stdbuf",
    "ionice",
    "taskset",
    "chrt",
    "numactl",
    "prlimit",
    "setarch",
    "linux32",
    "linux64",
    "setpriv",
    "flock",
    "lockf",
    "time",
    "command",
    "exec",
    "builtin",
    "xargs",
    "parallel",
    "watch",
    "script",
    "unbuffer",
    "chpst",
    "softlimit",
    "setuidgid",
    "setlock",
    "envdir",
    "envuidgid",
    "daemonize",
    "start-stop-daemon",
    "run-parts",
    "catchsegv",
    "eatmydata",
    "faketime",
    "fakeroot",
    "fakechroot",
    "torsocks",
    "proxychains",
    "cpulimit",
    "cgexec",
    "runcon",
    "capsh",
    "ld.so",
    "entr",
    "firejail",
    "bwrap",
    "proot",
    "sudo",
    "sudoedit",
    "su",
    "doas",
    "runuser",
    "pkexec",
    "sg",
    "newgrp",
    "chroot",
    "unshare",
    "nsenter",
    "strace",
    "ltrace",
    "valgrind",
    "perf",
    // Commands handed to a service outside the command's domain.
    "at",
    "batch",
    "crontab",
    "dbus-launch",
    "dbus-run-session",
    "ssh-agent",
    "screen",
    "tmux",
    "dtach",
    "abduco",
    "systemd-run",
    "systemd-nspawn",
    "ssh",
    "rsh",
    "slogin",
    "mosh",
    "docker",
    "podman",
    "kubectl",
    "ip",
    // Shells and multi-call binaries.
    "sh",
    "bash",
    "rbash",
    "dash",
    "ash",
    "zsh",
    "ksh",
    "mksh",
    "pdksh",
    "oksh",
    "yash",
    "posh",
    "csh",
    "tcsh",
    "fish",
    "elvish",
    "nu",
    "xonsh",
    "rc",
    "es",
    "busybox",
    "toybox",
    // Interpreters, and programs with an embedded language.
    "python",
    "pypy",
    "perl",
    "ruby",
    "irb",
    "node",
    "nodejs",
    "deno",
    "bun",
    "php",
    "lua",
    "luajit",
    "tclsh",
    "wish",
    "guile",
    "racket",
    "sbcl",
    "clisp",
    "ocaml",
    "ghci",
    "runghc",
    "Rscript",
    "julia",
    "osascript",
    "jshell",
    "groovy",
    "scala",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "busybox-awk",
    "expect",
    "gdb",
    "lldb",
    "vi",
    "vim",
    "nvim",
    "ex",
    "view",
    "rvim",
    "emacs",
    "nmap",
];

/// Whether granting `name` (a bare name or an absolute path) would grant
/// every program, because it runs its arguments as a command — the rule
/// where the exec guard is unavailable (DESIGN §16.2).
pub fn runs_arguments_as_command(name: &str) -> bool {
    listed_in(COMMAND_RUNNING_PROGRAMS, name)
}

/// Whether `name` stays refused under the exec guard: a programming
/// environment, a launcher or a command service
/// ([`PROGRAMMING_ENVIRONMENTS`]).
pub fn is_programming_environment(name: &str) -> bool {
    listed_in(PROGRAMMING_ENVIRONMENTS, name)
}

/// `name` compared by final path component under each of its spellings
/// ([`spellings`]); the dynamic loaders (`ld-linux*`, `ld-musl*`) are on
/// every list.
fn listed_in(list: &[&str], name: &str) -> bool {
    let base = name.rsplit('/').next().unwrap_or(name);
    if base.starts_with("ld-linux") || base.starts_with("ld-musl") {
        return true; // the dynamic loader runs any program it is given
    }
    spellings(base)
        .into_iter()
        .flatten()
        .any(|spelling| list.contains(&spelling))
}

/// The names a program file name stands for: itself; without a trailing
/// version (`python3.12` → `python`, `bash5` → `bash`); before its first
/// `.` (`vim.basic` → `vim`, `perl.real` → `perl`); and before its first
/// digit (`perl5.36-x86_64-linux-gnu` → `perl`, `lua5.4` → `lua`).
/// Distributions install one program under such names, so a list entry
/// covers all of them (at the price of a few names of other programs that
/// share a listed prefix, refused too).
fn spellings(base: &str) -> [Option<&str>; 4] {
    fn some(text: &str) -> Option<&str> {
        (!text.is_empty()).then_some(text)
    }
    let unversioned = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '-');
    let before_dot = base.split('.').next().unwrap_or(base);
    let before_digit = base
        .split(|c: char| c.is_ascii_digit())
        .next()
        .unwrap_or(base);
    [
        some(base),
        some(unversioned),
        some(before_dot),
        some(before_digit),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_named_in_spec_are_listed() {
        for name in [
            "setsid", "nohup", "env", "timeout", "xargs", "nice", "chroot", "sh", "bash", "dash",
            "zsh", "busybox", "stdbuf", "ionice", "taskset", "sudo", "su", "doas", "runuser",
            "flock", "chrt", "unshare", "nsenter", "script", "watch", "find", "strace", "ltrace",
            "gdb", "time", "command", "exec", "parallel", "ssh",
        ] {
            assert!(runs_arguments_as_command(name), "{name}");
        }
    }

    #[test]
    fn paths_and_versions_are_matched_by_their_program() {
        assert!(runs_arguments_as_command("/usr/bin/setsid"));
        assert!(runs_arguments_as_command("python3.12"));
        assert!(runs_arguments_as_command("/usr/bin/perl5.36"));
        assert!(runs_arguments_as_command("bash5"));
        assert!(runs_arguments_as_command("/lib64/ld-linux-x86-64.so.2"));
        // Debian's other names of refused programs (issue 38).
        for name in [
            "perl5.36-x86_64-linux-gnu",
            "perl5.36.0",
            "vim.basic",
            "vim.tiny",
            "lua5.4",
            "/usr/bin/python3.11-config",
        ] {
            assert!(is_programming_environment(name), "{name}");
        }
    }

    #[test]
    fn ordinary_programs_are_not_listed() {
        for name in [
            "echo",
            "cat",
            "ls",
            "true",
            "head",
            "/bin/echo",
            "grep",
            "uname",
        ] {
            assert!(!runs_arguments_as_command(name), "{name}");
        }
    }

    #[test]
    fn the_exec_guard_leaves_only_programming_environments_refused() {
        // DESIGN §16.2: grantable under the exec guard, refused without it.
        for name in [
            "git", "sed", "find", "tar", "zip", "rsync", "make", "less", "man",
        ] {
            assert!(!is_programming_environment(name), "{name}");
            assert!(runs_arguments_as_command(name), "{name}");
        }
        for name in [
            "sh",
            "bash5",
            "busybox",
            "python3.12",
            "env",
            "/usr/bin/env",
            "awk",
            "setarch",
            "ssh",
            "tmux",
            "vim",
            "gdb",
            "/lib64/ld-linux-x86-64.so.2",
        ] {
            assert!(is_programming_environment(name), "{name}");
        }
        // The full list is the exec guard's one plus the option-running
        // tools, which are grantable under the guard.
        assert_eq!(
            COMMAND_RUNNING_PROGRAMS.len(),
            PROGRAMMING_ENVIRONMENTS.len() + COMMAND_OPTION_PROGRAMS.len()
        );
        for name in PROGRAMMING_ENVIRONMENTS {
            assert!(runs_arguments_as_command(name), "{name}");
        }
        for name in COMMAND_OPTION_PROGRAMS {
            assert!(runs_arguments_as_command(name), "{name}");
            assert!(!is_programming_environment(name), "{name}");
        }
    }

    #[test]
    fn the_list_has_no_duplicates_or_paths() {
        // Across both parts too: a name is written in one of them only.
        let mut names: Vec<&str> = COMMAND_RUNNING_PROGRAMS.to_vec();
        names.sort_unstable();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count, "duplicate entries");
        assert!(
            COMMAND_RUNNING_PROGRAMS
                .iter()
                .all(|name| !name.contains('/') && !name.is_empty())
        );
    }
}
