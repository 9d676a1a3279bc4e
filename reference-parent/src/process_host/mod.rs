//! The proxied process host: runs `quirl.process.run(command)` for a worker.
//!
//! The worker never starts processes. When guest code calls
//! `quirl.process.run(command)`, the worker sends a host call and the parent
//! hands it to this module, which checks it against the grants, runs the
//! command under the host's own bounds and answers with a command outcome or
//! an error record. A denied or failed call is an error record for the guest
//! (a Lua error), never a reason to kill the worker; protocol violations
//! (wrong ids, a 17th call, a host call from a worker initialized without
//! process access) are the supervisor's to detect before calling here.
//!
//! This module is not a shell. A granted program runs with the parent's
//! user and can read what that user can; it runs exactly one program and
//! writes only where it is let (DESIGN §16.6–§16.8): where the kernel
//! offers them, the exec guard refuses every `execve` after the granted
//! program's own, the Landlock execute ruleset lets it execute only its own
//! file and interpreter, its writes are confined to its working directory
//! (unless that is `/`), a private directory and the directories the
//! configuration adds, it cannot signal or reach anything outside its own
//! tree, it holds no capability, and its tree lives in a PID namespace of
//! its own that dies with it. [`landlock_support`] and
//! `quirl-lua --version --verbose` say which of these apply.
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//! use quirl_lua_reference_parent::Cancel;
//! use quirl_lua_reference_parent::process_host::{
//!     run_command, Environment, Grants, ProcessAccess, ProcessHostConfig, ProcessRequest,
//! };
//!
//! let config = ProcessHostConfig::new(
//!     ProcessAccess { allow_process: true, process_enabled: true },
//!     Grants::parse(["process.spawn:echo"])?,
//!     Environment::from_parent(),
//!     "/",
//! )?;
//! let request = ProcessRequest {
//!     command: "echo hi".to_owned(),
//!     deadline: Instant::now() + Duration::from_secs(1),
//!     max_output_bytes: 1024,
//! };
//! let outcome = run_command(&config, &request, &Cancel::new())?;
//! assert_eq!((outcome.status, outcome.stdout.as_str()), (0, "hi\n"));
//! # Ok::<(), quirl_lua_reference_parent::process_host::HostError>(())
//! ```
//!
//! # Grants (deny by default)
//!
//! A call is allowed only when all of these hold, checked in this order:
//!
//! 1. The policy sent at initialize has `allow_process: true` **and**
//!    initialize had `process_enabled: true` ([`ProcessAccess`]). Otherwise:
//!    `validation`, "capability denied: process access is disabled".
//! 2. The command parses (below). Otherwise: `invalid_argument`.
//! 3. Its program word (the first word, after quote removal) is granted.
//!    Grant strings, as passed at initialize and on the CLI:
//!    - `process.spawn:NAME` grants the program word NAME exactly. NAME is
//!      either a bare name (no `/`), which is looked up in the granted
//!      `PATH`, or a normalized absolute path (`/usr/bin/echo`; no `.` or
//!      `..` components, no `//`, no trailing `/`), which is executed as
//!      written. NAME uses ASCII letters, digits and `-_./:=,@%+` only
//!      (Quirl's scoped-grant alphabet without the space). The grant matches
//!      the word as written: `process.spawn:echo` does not grant
//!      `/bin/echo`, and `process.spawn:/bin/echo` does not grant `echo`.
//!    - `process.spawn` (no NAME) grants every program, as Quirl's unscoped
//!      capability does; a program word with a `/` that is not absolute is
//!      then taken relative to the granted working directory. Use it only
//!      on purpose.
//!    - Any other string starting with `process.` is a configuration error;
//!      strings outside that namespace are worker capabilities and are
//!      ignored here. No grant at all (or initialize without `grants`)
//!      grants no program; this is stricter than Quirl, whose worker falls
//!      back to the unscoped grant.
//!
//!    Otherwise: `validation`, "capability denied: process.spawn:WORD".
//! 4. A bare NAME is found as an executable regular file in one of the
//!    absolute directories of the granted `PATH` that the command could not
//!    write, first match wins (empty and relative `PATH` entries are
//!    skipped). Otherwise: `process_spawn`. A name is judged by the file it
//!    resolves to: a programming environment under another name is refused
//!    when the configuration is made (DESIGN §16.2 "Identity").
//!
//! The child's environment is exactly [`Environment`]: by default `PATH`
//! copied from the parent (if set), a private `HOME` and `TMPDIR` unless
//! declared, plus declared entries; nothing else is inherited. Its working
//! directory is the granted absolute directory.
//!
//! # Command language
//!
//! A command is POSIX shell word splitting and quoting and nothing else. The
//! rule: **an accepted command yields exactly the argument vector a POSIX
//! `sh` would build for it**; every construct whose meaning would differ is
//! rejected with `invalid_argument`, and the message names the construct.
//!
//! - Size and bytes: at most 1,048,576 bytes ([`COMMAND_BYTES_MAX`]); no
//!   NUL byte anywhere, quoted or not.
//! - Words are separated by unquoted spaces and tabs. Unquoted newline is a
//!   command separator and is rejected; other unquoted control characters
//!   (`U+0001`–`U+001F` except tab, and `U+007F`) are rejected.
//! - `'…'`: every character up to the next `'` is literal (newlines too).
//! - `"…"`: characters are literal except that a backslash escapes only
//!   `\` `"` `$` and `` ` ``, and backslash-newline is removed; before any
//!   other character the backslash stays. `$` expansions and backquotes
//!   inside double quotes are rejected as outside.
//! - Unquoted backslash makes the next character literal; backslash-newline
//!   is removed (line continuation); a final lone backslash is rejected.
//! - Quoted or escaped parts join the surrounding word; `''` and `""` are
//!   empty arguments.
//! - Rejected when unquoted, anywhere: the background operator `&`; the
//!   control operators `;` `;;` `|` `|&` `&&` `||`; redirections `<` `>`
//!   `>>` `>|` `<>` `<<` `<<-` `<<<` `<&` `>&` `&>` `&>>`, also with an fd
//!   number in front (`2>`, `2>&1`); process substitution `<(` `>(`;
//!   subshells `(` `)`; the glob characters `*` `?` `[`.
//! - Rejected when unquoted or in double quotes: parameter expansion
//!   (`$NAME`, `${…}`, and the special parameters `$0`–`$9` `$@` `$*` `$#`
//!   `$?` `$-` `$$` `$!`), command substitution `$(…)` and `` `…` ``,
//!   arithmetic `$((…))`. Unquoted `$'…'` and `$"…"` are rejected. A `$`
//!   followed by anything else (end, blank, `/`, …) is a literal `$`.
//! - Rejected at the start of an unquoted word: tilde expansion `~` and
//!   comments `#`. Elsewhere in a word both are literal.
//! - `{`, `}`, `]`, `!`, `=` and `,` are literal inside words, as in POSIX
//!   `sh` (bash's brace expansion `{a,b}` is not performed).
//! - The first word must be non-empty and is rejected when it is: a
//!   variable assignment (`NAME=value` with an unquoted `NAME=`); an
//!   unquoted reserved word (`!` `{` `}` `case` `do` `done` `elif` `else`
//!   `esac` `fi` `for` `if` `in` `then` `until` `while` `]]`
//!   `function` `select`); a job-control command (`fg` `bg` `jobs` `disown`
//!   `wait` `suspend`, or `kill` with an argument starting with `%`); a
//!   session built-in (`.` `alias` `break` `cd` `continue` `eval` `exec`
//!   `exit` `export` `local` `readonly` `return` `set` `shift` `source`
//!   `trap` `ulimit` `umask` `unalias` `unset`). Built-in and job-control
//!   names are compared after quote removal and by final path component
//!   (`'fg'` and `/usr/bin/wait` are rejected too).
//! - No command is empty: only blanks (or nothing) is rejected.
//!
//! # Execution
//!
//! - The program is started with `execve` on the resolved path (no shell, no
//!   `PATH` search by libc, no `/bin/sh` fallback for files without a
//!   recognised format), `argv[0]` being the program word as written.
//! - Standard input is `/dev/null`. Standard output and standard error are
//!   separate pipes, each retaining at most `min(max_output_bytes, 1 MiB)`
//!   bytes ([`OUTPUT_BYTES_MAX`]). Output past the limit is read and
//!   discarded until the program ends, so it never blocks on a full pipe;
//!   the call then fails with `resource_limit`, whose context gives the
//!   limit and the retained and discarded bytes of both streams and whose
//!   `exit_status` is set. No partial output is returned.
//! - The program calls `setsid()`: it leads a new session and process group
//!   and has no controlling terminal. It runs with `no_new_privs`
//!   (set-user-ID bits and file capabilities are ignored), no capability,
//!   all signal dispositions reset to default, an empty signal mask, and
//!   every descriptor above 2 closed on exec; where the kernel allows it,
//!   as the second process of a PID namespace whose init is ours (DESIGN
//!   §16.6 "How the child is made").
//! - Deadline: an absolute instant, for a host call
//!   `min(arrival + deadline_ms, request deadline)`. At the deadline, or
//!   when the cancellation token fires, the whole tree is killed with
//!   `SIGKILL` and reaped and the call fails with `resource_limit`
//!   ("command exceeded its deadline" / "command was cancelled"). A
//!   deadline already past, or a token already cancelled, fails the call
//!   before anything is started.
//! - Lifetime: the command's lifetime is its first process's. When that
//!   process exits, whatever it left running in its session (background
//!   children included) is killed, remaining output is read to end of
//!   file, and the outcome is returned. Nothing outlives the call.
//! - Status: the exit code, or `128 + N` when the program was ended by
//!   signal N (the wire outcome cannot tell `exit 137` from `SIGKILL`; the
//!   Rust [`CommandOutcomeData::signal`] can).
//! - Text: output is decoded as UTF-8; invalid sequences are replaced by
//!   U+FFFD (as Quirl does), and [`CommandOutcomeData`] records that it
//!   happened. If the JSON encoding of both streams would exceed
//!   [`OUTCOME_ENCODED_BYTES_MAX`] (control characters and replacement
//!   characters grow when encoded) the call fails with `resource_limit`, so
//!   a host response always fits in one frame.
//! - Tree cleanup is safe against PID and PGID reuse: the first process is
//!   never reaped before the group and session are killed, and its unreaped
//!   PID keeps those ids from being reused. In a PID namespace the
//!   namespace's end kills every descendant however it forked; without one,
//!   `tree.rs` sweeps descendants that left the group (its one documented
//!   gap is there).

pub(crate) mod command_language;
mod command_spawn;
mod exec;
mod exec_guard;
mod exec_image;
mod exec_ruleset;
mod grants;
mod host_call;
mod host_error;
mod landlock_abi;
pub(crate) mod orphans;
mod private_dirs;
mod program_identity;
mod tree;
mod wrappers;
mod write_ruleset;

// The token the host waits on (`cancel::CancelSignal`) lives with the
// workers and pools that share it; the submodules name it `super::cancel`.
use crate::cancel;
pub use command_language::{COMMAND_BYTES_MAX, parse_command};
pub use command_spawn::pid_namespace_support;
pub(crate) use command_spawn::{pid_namespace_summary, user_namespace_in_effect};
pub use exec::{
    CommandOutcomeData, OUTCOME_ENCODED_BYTES_MAX, OUTPUT_BYTES_MAX, ProcessRequest, run_command,
};
pub(crate) use exec_guard::exec_guard_summary;
pub use exec_guard::exec_guard_support;
pub use exec_ruleset::{LandlockSupport, landlock_support};
pub use grants::{
    DEFAULT_COMMAND_PIDS_MAX, Environment, GrantRule, Grants, PROCESS_SPAWN_GRANT,
    PROCESS_SPAWN_GRANT_PREFIX, ProcessAccess, ProcessHostConfig,
};
pub use host_call::{call_deadline, run_host_call};
pub use host_error::HostError;
pub use landlock_abi::kernel_abi as landlock_kernel_abi;
pub use orphans::{adopt_orphans, end_adopted_orphans};
/// The v1 error codes a [`HostError`] carries (the protocol's own type).
pub use quirl_lua_protocol::records::ErrorCode;
pub use wrappers::{
    COMMAND_OPTION_PROGRAMS, COMMAND_RUNNING_PROGRAMS, PROGRAMMING_ENVIRONMENTS,
    is_programming_environment, runs_arguments_as_command,
};
pub(crate) use write_ruleset::write_confinement_summary;
