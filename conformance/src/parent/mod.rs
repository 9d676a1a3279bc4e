//! The parent suite: scripted hostile workers against any parent command.
//!
//! For each case the runner starts the parent under test as
//!
//! ```text
//! QUIRL_LUA_WORKER="<this executable> fake-worker <CASE> --pid-file <FILE>" \
//!     CMD [ARGS…] --wall-time-ms <W> [--allow-process] [--grant <CAP>]… eval <SOURCE>
//! ```
//!
//! in a process group of its own, with stdin from the null device (or a
//! pipe holding the case's `parent_stdin`, then closed), and
//! judges what happens: its exit status, the error code it names on
//! stderr, the JSON it prints on stdout, how long it took from the moment
//! the fake worker read the request until the parent exited, and whether
//! any process of the fake worker's tree survived it or was left unreaped.
//! The runner is a child subreaper, so a process the parent abandons ends
//! up as the runner's child, where it is seen, killed and reaped.

pub mod cases;

use crate::exec::Case;
use crate::fake_worker::{self, SENTINEL_ENV};
use crate::proc::{self, Contained};
use crate::report::Verdict;
use cases::{Bound, ParentCaseData, ParentCaseFile};
use rustix::event::PollFlags;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The prefix of the parent suite's case file names (`cases/parent*.json`,
/// embedded).
pub const CASE_FILE_PREFIX: &str = "parent";

/// Slack on top of the wall time for `deadline` bounds (SPEC.md: deadline + 200 ms).
pub const DEADLINE_SLACK_MS: u64 = 200;

/// Patience for killed processes to finish dying before they count as survivors.
const DEATH_PATIENCE: Duration = Duration::from_secs(1);

/// Bound on a whole parent run when the case names none.
const RUN_LIMIT: Duration = Duration::from_secs(20);

/// Bytes of parent output kept.
const OUTPUT_KEEP_BYTES: usize = 8 * 1024 * 1024;

static RUN_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Every parent case, parsed.
pub fn all_cases() -> Result<Vec<ParentCaseData>, String> {
    let mut cases = Vec::new();
    for (name, text) in crate::embedded::case_files(CASE_FILE_PREFIX) {
        let file: ParentCaseFile =
            serde_json::from_str(text).map_err(|error| format!("{name}: {error}"))?;
        cases.extend(file.cases);
    }
    Ok(cases)
}

/// The case called `name`.
pub fn find_case(name: &str) -> Option<ParentCaseData> {
    all_cases().ok()?.into_iter().find(|case| case.name == name)
}

/// One parent case, ready to run.
pub struct ParentCase {
    data: ParentCaseData,
    command: Arc<Vec<OsString>>,
    exe: Arc<PathBuf>,
}

impl Case for ParentCase {
    fn name(&self) -> &str {
        &self.data.name
    }
    fn spec(&self) -> &str {
        &self.data.spec
    }
    fn tags(&self) -> &[String] {
        &self.data.tags
    }
    fn run(&self) -> Verdict {
        run_case(&self.data, &self.command, &self.exe)
    }
}

/// Build the suite for `command`; `exe` is this executable (the fake worker).
pub fn suite(command: Vec<OsString>, exe: PathBuf) -> Result<Vec<ParentCase>, String> {
    let command = Arc::new(command);
    let exe = Arc::new(exe);
    let cases = all_cases()?;
    let mut seen = std::collections::BTreeSet::new();
    for case in &cases {
        if !seen.insert(case.name.clone()) {
            return Err(format!("two parent cases are named {}", case.name));
        }
    }
    Ok(cases
        .into_iter()
        .map(|data| ParentCase {
            data,
            command: Arc::clone(&command),
            exe: Arc::clone(&exe),
        })
        .collect())
}

/// Quote one word for a POSIX shell-like command line.
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-=:,+".contains(&b))
    {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The `QUIRL_LUA_WORKER` value for a case.
pub fn worker_command_line(exe: &Path, case: &str, pid_file: &Path) -> String {
    [
        exe.display().to_string(),
        "fake-worker".to_owned(),
        case.to_owned(),
        "--pid-file".to_owned(),
        pid_file.display().to_string(),
    ]
    .iter()
    .map(|word| shell_quote(word))
    .collect::<Vec<_>>()
    .join(" ")
}

/// The arguments appended to the parent command for a case.
pub fn parent_arguments(case: &ParentCaseData) -> Vec<String> {
    let mut args = vec!["--wall-time-ms".to_owned(), case.wall_time_ms.to_string()];
    if case.allow_process {
        args.push("--allow-process".to_owned());
    }
    for grant in &case.grants {
        args.push("--grant".to_owned());
        args.push(grant.clone());
    }
    args.push("eval".to_owned());
    args.push(case.source.clone());
    args
}

/// What the fake worker recorded.
#[derive(Debug, Default)]
struct Record {
    pids: Vec<(i32, u64, String)>,
    spawn: Option<Vec<String>>,
    init: Option<Vec<String>>,
    requests: Vec<(u64, String)>,
    parent_errors: Vec<String>,
}

fn read_record(path: &Path) -> Record {
    let mut record = Record::default();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for line in text.lines() {
        let mut words = line.split(' ');
        match words.next() {
            Some("pid") => {
                let pid = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                let start = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                let role = words.next().unwrap_or("?").to_owned();
                if pid > 1 {
                    record.pids.push((pid, start, role));
                }
            }
            Some("spawn") => record.spawn = Some(words.map(str::to_owned).collect()),
            Some("init") => record.init = Some(words.map(str::to_owned).collect()),
            Some("request") => {
                let at = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                let operation = words.next().unwrap_or("?").to_owned();
                record.requests.push((at, operation));
            }
            Some("parent_error") => {
                record
                    .parent_errors
                    .push(line.trim_start_matches("parent_error ").to_owned());
            }
            _ => {}
        }
    }
    record
}

/// Whether `text` names `code` as a whole word.
pub fn names_code(text: &str, code: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(code).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + code.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

struct Outcome {
    /// The parent's process, kept (not yet group-killed) until the
    /// leftovers are judged: dropping it kills the parent's process group.
    _process: Contained,
    status: Option<std::process::ExitStatus>,
    exited_ns: u64,
    spawned_ns: u64,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn file_from<T: Into<OwnedFd>>(pipe: T) -> Option<File> {
    let fd: OwnedFd = pipe.into();
    proc::set_nonblocking(fd.as_fd()).ok()?;
    Some(File::from(fd))
}

/// The parent's standard input: the null device, or a pipe that holds
/// `text` and is closed (a command that inherits it reads the text).
fn parent_stdin(text: Option<&str>) -> Result<Stdio, String> {
    let Some(text) = text else {
        return Ok(Stdio::null());
    };
    let (reader, mut writer) =
        std::io::pipe().map_err(|error| format!("cannot make the parent's stdin: {error}"))?;
    // Small enough for the pipe's buffer: written at once, then closed.
    std::io::Write::write_all(&mut writer, text.as_bytes())
        .map_err(|error| format!("cannot fill the parent's stdin: {error}"))?;
    drop(writer);
    Ok(Stdio::from(reader))
}

/// Run the parent command to its end (bounded), collecting its output.
fn run_parent(
    command: &[OsString],
    args: &[String],
    env: &[(OsString, OsString)],
    stdin: Stdio,
) -> Result<Outcome, String> {
    let (program, fixed) = command
        .split_first()
        .ok_or_else(|| "empty parent command".to_owned())?;
    let mut all_args: Vec<OsString> = fixed.to_vec();
    all_args.extend(args.iter().map(OsString::from));
    let spawned_ns = proc::monotonic_ns();
    let mut child = Contained::spawn(
        program,
        &all_args,
        env,
        stdin,
        Stdio::piped(),
        Stdio::piped(),
    )
    .map_err(|error| format!("cannot start the parent command: {error}"))?;
    let mut stdout = child.take_stdout().and_then(file_from);
    let mut stderr = child.take_stderr().and_then(file_from);
    let mut out = Vec::new();
    let mut err = Vec::new();
    let limit = Instant::now() + RUN_LIMIT;
    let mut exited_ns = 0;
    let mut linger_until: Option<Instant> = None;
    loop {
        if exited_ns == 0 && child.try_status().is_some() {
            exited_ns = proc::monotonic_ns();
            linger_until = Some(Instant::now() + Duration::from_millis(300));
        }
        if let Some(file) = stdout.as_mut()
            && !proc::drain_nonblocking(file, &mut out, OUTPUT_KEEP_BYTES).unwrap_or(false)
        {
            stdout = None;
        }
        if let Some(file) = stderr.as_mut()
            && !proc::drain_nonblocking(file, &mut err, OUTPUT_KEEP_BYTES).unwrap_or(false)
        {
            stderr = None;
        }
        let now = Instant::now();
        if exited_ns != 0
            && (stdout.is_none() && stderr.is_none() || linger_until.is_some_and(|t| now >= t))
        {
            break;
        }
        if now >= limit {
            child.kill_and_reap();
            return Err(format!(
                "the parent did not exit within {} s (killed)",
                RUN_LIMIT.as_secs()
            ));
        }
        wait_for_activity(
            [stdout.as_ref(), stderr.as_ref()],
            &child,
            exited_ns != 0,
            limit,
            now,
        );
    }
    let status = child.try_status();
    Ok(Outcome {
        _process: child,
        status,
        exited_ns,
        spawned_ns,
        stdout: out,
        stderr: err,
    })
}

/// Sleep until one of the parent's open output pipes is readable or (before
/// it exited) the parent exits, at most a short interval and never past
/// `limit`.
fn wait_for_activity(
    pipes: [Option<&File>; 2],
    child: &Contained,
    exited: bool,
    limit: Instant,
    now: Instant,
) {
    let mut polls = Vec::new();
    for file in pipes.into_iter().flatten() {
        polls.push((file.as_fd(), PollFlags::IN));
    }
    if !exited && let Some(fd) = child.exit_fd() {
        polls.push((fd, PollFlags::IN));
    }
    let wait = if exited {
        Duration::from_millis(20)
    } else {
        Duration::from_millis(if child.exit_fd().is_some() { 1000 } else { 2 })
    };
    if polls.is_empty() {
        std::thread::sleep(wait.min(Duration::from_millis(5)));
    } else {
        let _ = proc::wait_ready(&polls, wait.min(limit.saturating_duration_since(now)));
    }
}

fn abbreviate(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    if text.len() > 300 {
        let mut cut = 300;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}… ({} bytes)", &text[..cut], text.len())
    } else {
        text.to_owned()
    }
}

/// Run one parent case.
pub fn run_case(case: &ParentCaseData, command: &[OsString], exe: &Path) -> Verdict {
    let run = RUN_COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("quirl-conformance-{}-{run}", std::process::id()));
    if let Err(error) = std::fs::create_dir_all(&dir) {
        return Verdict::fail(format!("cannot create {}: {error}", dir.display()));
    }
    let pid_file = dir.join("pids");
    let env = vec![
        (
            OsString::from(crate::parent::WORKER_ENV),
            OsString::from(worker_command_line(exe, &case.name, &pid_file)),
        ),
        (OsString::from(SENTINEL_ENV), OsString::from("1")),
    ];
    let stdin = match parent_stdin(case.parent_stdin.as_deref()) {
        Ok(stdin) => stdin,
        Err(error) => return Verdict::fail(error),
    };
    let verdict = match run_parent(command, &parent_arguments(case), &env, stdin) {
        Ok(outcome) => judge(case, &outcome, &pid_file),
        Err(error) => {
            let record = read_record(&pid_file);
            cleanup(&record, &pid_file);
            Verdict::fail(error)
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    verdict
}

/// The environment variable naming the worker command (the contract).
pub const WORKER_ENV: &str = "QUIRL_LUA_WORKER";

fn judge(case: &ParentCaseData, outcome: &Outcome, pid_file: &Path) -> Verdict {
    let record = read_record(pid_file);
    let mut problems = Vec::new();
    problems.extend(
        record
            .parent_errors
            .iter()
            .map(|e| format!("the parent broke the protocol: {e}")),
    );
    let expect = &case.expect;
    problems.extend(exit_problem(expect, outcome));
    output_problems(expect, outcome, &mut problems);
    if let Some(bound) = &expect.bound {
        problems.extend(bound_problem(case, bound, outcome, &record));
    }
    if let Some(init) = &record.init {
        init_problems(case, init, &mut problems);
    }
    if let Some(checks) = &expect.spawn {
        match &record.spawn {
            Some(facts) => problems.extend(spawn_problems(checks, facts, &record)),
            None => problems.push("the fake worker recorded no spawn facts".to_owned()),
        }
    }
    problems.extend(leftovers(&record, pid_file));
    cleanup(&record, pid_file);
    if problems.is_empty() {
        Verdict::Pass
    } else {
        Verdict::fail(problems.join("; "))
    }
}

/// The parent's exit status against the expected ones.
fn exit_problem(expect: &cases::ParentExpect, outcome: &Outcome) -> Option<String> {
    match outcome.status.and_then(|s| s.code()) {
        Some(code) if expect.exit.contains(code) => None,
        Some(code) => Some(format!(
            "exit status {code}, expected {}",
            expect.exit.describe()
        )),
        None => Some(format!(
            "the parent ended with {}",
            outcome
                .status
                .map_or_else(|| "no status".to_owned(), proc::describe_status)
        )),
    }
}

/// `value` with `${CWD}`, `${PATH}` and `${HOME}` in its strings replaced by
/// the runner's working directory and environment (the parent inherits
/// both, SPEC §19.3).
fn substitute_runner(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(text) => {
            let cwd = std::env::current_dir()
                .map(|dir| dir.display().to_string())
                .unwrap_or_default();
            let var = |name: &str| std::env::var(name).unwrap_or_default();
            Value::String(
                text.replace("${CWD}", &cwd)
                    .replace("${PATH}", &var("PATH"))
                    .replace("${HOME}", &var("HOME")),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(substitute_runner).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, item)| (key.clone(), substitute_runner(item)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Stands in an expected string for a directory of the command's own.
const PRIVATE_DIR: &str = "${PRIVATE_DIR}";

/// `got` equals `want`, except that a string of `want` holding
/// [`PRIVATE_DIR`] once matches any string with the same text around an
/// absolute path that is not `/`, the runner's `HOME` or working directory,
/// nor a directory above either (SPEC §19.3-d: not the operator's files).
fn matches_expected(want: &serde_json::Value, got: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (want, got) {
        (Value::String(want), Value::String(got)) => match want.split_once(PRIVATE_DIR) {
            Some((before, after)) => got
                .strip_prefix(before)
                .and_then(|rest| rest.strip_suffix(after))
                .is_some_and(is_private_dir),
            None => want == got,
        },
        (Value::Array(want), Value::Array(got)) => {
            want.len() == got.len()
                && want
                    .iter()
                    .zip(got)
                    .all(|(want, got)| matches_expected(want, got))
        }
        (Value::Object(want), Value::Object(got)) => {
            want.len() == got.len()
                && want
                    .iter()
                    .all(|(key, want)| got.get(key).is_some_and(|got| matches_expected(want, got)))
        }
        _ => want == got,
    }
}

/// An absolute path that is not `/` and holds none of the runner's own
/// places (its `HOME`, its working directory) at or below it.
fn is_private_dir(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    if !path.starts_with('/') || path.contains('\n') {
        return false;
    }
    let cwd = std::env::current_dir()
        .map(|dir| dir.display().to_string())
        .unwrap_or_default();
    let home = std::env::var("HOME").unwrap_or_default();
    [cwd, home].iter().all(|place| {
        let place = place.trim_end_matches('/');
        place.is_empty() || !(place == path || place.starts_with(&format!("{path}/")))
    })
}

/// The parent's stderr (naming the error code) and stdout (the JSON value,
/// or a subset of it, and text it must not contain) against the expectation.
fn output_problems(expect: &cases::ParentExpect, outcome: &Outcome, problems: &mut Vec<String>) {
    let stderr = String::from_utf8_lossy(&outcome.stderr);
    if let Some(codes) = &expect.code
        && !codes.list().iter().any(|code| names_code(&stderr, code))
    {
        problems.push(format!(
            "stderr does not name the error code {}: {}",
            codes.list().join(" or "),
            abbreviate(&outcome.stderr)
        ));
    }
    if expect.stdout.is_some() || expect.stdout_subset.is_some() {
        match serde_json::from_slice::<serde_json::Value>(outcome.stdout.trim_ascii()) {
            Ok(value) => {
                if let Some(want) = expect.stdout.as_ref().map(substitute_runner)
                    && !matches_expected(&want, &value)
                {
                    problems.push(format!(
                        "stdout {}, expected {}",
                        abbreviate(&outcome.stdout),
                        abbreviate(want.to_string().as_bytes())
                    ));
                }
                if let Some(want) = expect.stdout_subset.as_ref().map(substitute_runner)
                    && !crate::worker::script::subset(&want, &value)
                {
                    problems.push(format!(
                        "stdout {} does not contain {}",
                        abbreviate(&outcome.stdout),
                        abbreviate(want.to_string().as_bytes())
                    ));
                }
            }
            Err(_) => problems.push(format!(
                "stdout is not one JSON value: {}",
                abbreviate(&outcome.stdout)
            )),
        }
    }
    if let Some(text) = &expect.stdout_excludes
        && String::from_utf8_lossy(&outcome.stdout).contains(text.as_str())
    {
        problems.push(format!(
            "stdout contains {text:?}: {}",
            abbreviate(&outcome.stdout)
        ));
    }
}

/// How long after the (last non-`initialize`) request the parent exited,
/// against the case's bound.
fn bound_problem(
    case: &ParentCaseData,
    bound: &Bound,
    outcome: &Outcome,
    record: &Record,
) -> Option<String> {
    let from = record
        .requests
        .iter()
        .rev()
        .find(|(_, op)| op != "initialize")
        .or_else(|| record.requests.last())
        .map_or(outcome.spawned_ns, |(at, _)| *at);
    let elapsed_ms = outcome.exited_ns.saturating_sub(from) / 1_000_000;
    let (limit, what) = match bound {
        Bound::Named(name) if name == "deadline" => (
            case.wall_time_ms + DEADLINE_SLACK_MS,
            "the deadline + 200 ms",
        ),
        Bound::Named(name) if name == "prompt" => (
            case.wall_time_ms / 2,
            "half the wall time (the parent must not wait for its deadline)",
        ),
        Bound::Named(_) => (0, "an unknown bound"),
        Bound::Millis(ms) => (*ms, "the case's bound"),
    };
    (elapsed_ms > limit).then(|| {
        format!(
            "the parent exited {elapsed_ms} ms after the request; the bound is {limit} ms ({what})"
        )
    })
}

/// The `initialize` the parent sent (as the fake worker recorded it)
/// against the command line it was given (SPEC §19.3): the wall time,
/// `allow_process`, and the grants — the `--grant` values in their order,
/// `null` or `[]` without any. (Memory and instructions are the parent's
/// own; the fake worker decoded them, so they lie in §10's ranges.)
fn init_problems(case: &ParentCaseData, init: &[String], problems: &mut Vec<String>) {
    let wall = init.first().and_then(|w| w.parse::<u64>().ok());
    if wall != Some(case.wall_time_ms) {
        problems.push(format!(
            "initialize carried wall_time_ms {}, not the --wall-time-ms {} it was given",
            init.first().map_or("?", String::as_str),
            case.wall_time_ms
        ));
    }
    let allow = init.get(1).map(String::as_str);
    if allow != Some(if case.allow_process { "true" } else { "false" }) {
        problems.push(format!(
            "initialize carried allow_process {}, the command line said {}",
            allow.unwrap_or("?"),
            case.allow_process
        ));
    }
    let grants = init
        .get(5..)
        .map(|words| words.join(" "))
        .and_then(|text| serde_json::from_str::<Option<Vec<String>>>(&text).ok());
    let fits = match &grants {
        Some(Some(sent)) => *sent == case.grants,
        Some(None) => case.grants.is_empty(),
        None => false,
    };
    if !fits {
        problems.push(format!(
            "initialize carried grants {}, the command line gave {:?} (null or [] for none, §19.3-b)",
            init.get(5..).map_or("?".to_owned(), |words| words.join(" ")),
            case.grants
        ));
    }
}

fn spawn_problems(checks: &cases::SpawnChecks, facts: &[String], record: &Record) -> Vec<String> {
    let mut problems = Vec::new();
    let field = |i: usize| facts.get(i).map_or("?", String::as_str);
    let worker_pid = record
        .pids
        .iter()
        .find(|(_, _, role)| role == "worker")
        .map(|(pid, _, _)| pid.to_string());
    // SPEC §3.1-d: a group of its own is one the worker leads, or one led by
    // another child of the parent (an anchor that holds the group id); a
    // group led by the parent or by anyone else is not.
    let leads = worker_pid.as_deref() == Some(field(0));
    let anchored = field(6) != "-1" && field(7) == field(6) && field(0) != field(6);
    if checks.own_group && !leads && !anchored {
        problems.push(format!(
            "the worker is not in a process group of its own (pgid {}, pid {}, its parent {}, \
             the group leader's parent {}) (§3.1)",
            field(0),
            worker_pid.as_deref().unwrap_or("?"),
            field(6),
            field(7)
        ));
    }
    if checks.no_terminal && field(2) != "0" {
        problems.push(format!(
            "the worker has a controlling terminal (tty_nr {}) (§3.1)",
            field(2)
        ));
    }
    if checks.stdout_null && field(3) != "/dev/null" {
        problems.push(format!(
            "the worker's stdout is {}, not the null device (§3.1)",
            field(3)
        ));
    }
    if checks.clean_environment && field(4) != "0" {
        problems.push(
            "the parent's environment reached the worker (it SHOULD be cleared, §3.1)".to_owned(),
        );
    }
    if checks.no_extra_descriptors && field(5) != "-" {
        problems.push(format!(
            "the worker inherited descriptors beyond 0-2: {} (§3.1 SHOULD)",
            field(5)
        ));
    }
    problems
}

/// Survivors, unreaped workers and host-call commands left running.
fn leftovers(record: &Record, pid_file: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let me = proc::own_pid();
    let until = Instant::now() + DEATH_PATIENCE;
    for (pid, start, role) in &record.pids {
        loop {
            let stat = proc::stat(*pid).filter(|s| s.start_time == *start);
            match stat {
                None => break,
                Some(stat) if !stat.is_alive() => {
                    if role == "worker" && stat.ppid == me {
                        problems.push(format!(
                            "the parent exited without reaping its worker {pid} (§13.2)"
                        ));
                    }
                    break;
                }
                Some(_) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Some(_) => {
                    problems.push(format!(
                        "process {pid} ({role} of the fake worker's tree) survived the parent (§13.2, §17.4)"
                    ));
                    break;
                }
            }
        }
    }
    let marker = fake_worker::marker(pid_file);
    let survivors = proc::living_with_marker(&marker);
    if !survivors.is_empty() {
        let pids: Vec<String> = survivors.iter().map(|p| p.pid.to_string()).collect();
        problems.push(format!(
            "a command run for a host call is still running after the parent exited (pids {}) (§16)",
            pids.join(", ")
        ));
    }
    problems
}

/// Kill and reap whatever a case left behind.
fn cleanup(record: &Record, pid_file: &Path) {
    for (pid, start, _) in &record.pids {
        if proc::stat(*pid).is_some_and(|s| s.start_time == *start && s.is_alive()) {
            proc::kill_pid(*pid);
        }
    }
    for survivor in proc::living_with_marker(&fake_worker::marker(pid_file)) {
        proc::kill_pid(survivor.pid);
    }
    let me = proc::own_pid();
    let until = Instant::now() + Duration::from_millis(500);
    for (pid, start, _) in &record.pids {
        while let Some(stat) = proc::stat(*pid).filter(|s| s.start_time == *start) {
            if stat.ppid == me && !stat.is_alive() {
                proc::reap_if_zombie(*pid);
                break;
            }
            if stat.ppid != me || Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    // SPEC §19.3-d: HOME and TMPDIR of a command are its own directories,
    // never the operator's HOME, the working directory or a place above.
    #[test]
    fn a_private_dir_is_an_absolute_path_holding_none_of_the_runners_places() {
        let want = serde_json::json!([["HOME=${PRIVATE_DIR}", "PATH=/bin"]]);
        let got = |home: &str| serde_json::json!([[format!("HOME={home}"), "PATH=/bin"]]);
        assert!(matches_expected(&want, &got("/tmp/quirl-cmd-1/home")));
        let runner_home = std::env::var("HOME").unwrap();
        let cwd = std::env::current_dir().unwrap().display().to_string();
        for bad in [runner_home.as_str(), cwd.as_str(), "/", "relative/home", ""] {
            assert!(!matches_expected(&want, &got(bad)), "{bad:?}");
        }
        let above = std::path::Path::new(&cwd)
            .parent()
            .unwrap()
            .display()
            .to_string();
        assert!(!matches_expected(&want, &got(&above)), "{above}");
        let wrong_path = serde_json::json!([["HOME=/tmp/x", "PATH=/usr/bin"]]);
        assert!(!matches_expected(&want, &wrong_path));
        let longer = serde_json::json!([["HOME=/tmp/x", "PATH=/bin", "X=1"]]);
        assert!(!matches_expected(&want, &longer));
    }

    // SPEC §3.1-d: a group of its own is the worker's, or an anchor's that
    // the same parent started; the parent's own group is neither.
    #[test]
    fn a_group_of_its_own_is_led_by_the_worker_or_by_a_sibling_anchor() {
        let checks = cases::SpawnChecks {
            own_group: true,
            ..cases::SpawnChecks::default()
        };
        let record = Record {
            pids: vec![(500, 1, "worker".to_owned())],
            ..Record::default()
        };
        let facts = |pgid: &str, ppid: &str, leader_ppid: &str| -> Vec<String> {
            [pgid, "1", "0", "/dev/null", "0", "-", ppid, leader_ppid]
                .map(str::to_owned)
                .to_vec()
        };
        let problems = |f: &[String]| spawn_problems(&checks, f, &record);
        assert!(problems(&facts("500", "400", "300")).is_empty(), "leads");
        assert!(problems(&facts("450", "400", "400")).is_empty(), "anchor");
        assert_eq!(
            problems(&facts("400", "400", "300")).len(),
            1,
            "the parent's"
        );
        assert_eq!(problems(&facts("77", "400", "1")).len(), 1, "a stranger's");
        assert_eq!(problems(&facts("77", "-1", "-1")).len(), 1, "unknown");
    }

    #[test]
    fn every_case_parses_and_is_named_after_a_section() {
        let cases = all_cases().unwrap();
        assert!(cases.len() >= 40, "{}", cases.len());
        let mut names = std::collections::BTreeSet::new();
        for case in &cases {
            assert!(names.insert(case.name.clone()), "{} twice", case.name);
            assert!(case.spec.starts_with('§'), "{}", case.name);
            if let Some(Bound::Named(name)) = &case.expect.bound {
                assert!(name == "deadline" || name == "prompt", "{}", case.name);
            }
        }
    }

    #[test]
    fn quoting_survives_spaces_and_quotes() {
        assert_eq!(shell_quote("/a/b"), "/a/b");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn code_is_matched_as_a_word() {
        assert!(names_code("error[resource_limit]: x", "resource_limit"));
        assert!(!names_code("error[resource_limits]", "resource_limit"));
        assert!(names_code("lua", "lua"));
        assert!(!names_code("plural", "lua"));
    }

    #[test]
    fn arguments_follow_the_contract() {
        let mut case = find_case("session.valid_session_prints_the_result").unwrap();
        case.allow_process = true;
        case.grants = vec!["process.spawn:echo".to_owned()];
        let args = parent_arguments(&case);
        assert_eq!(args[0], "--wall-time-ms");
        assert!(args.contains(&"--allow-process".to_owned()));
        assert_eq!(args[args.len() - 2], "eval");
    }
}
