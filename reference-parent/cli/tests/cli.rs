//! The `quirl-lua` command line against scripted workers: output, exit
//! codes, worker selection (`--worker`, `QUIRL_LUA_WORKER`) and `batch`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_testkit::procfs;

use std::io::Write;
use std::process::{Command, Output, Stdio};

const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");

fn quirl_lua(worker_env: Option<&str>, args: &[&str], stdin: &str) -> Output {
    let mut command = Command::new(CLI);
    command
        .args(args)
        .env_remove("QUIRL_LUA_WORKER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(worker) = worker_env {
        command.env("QUIRL_LUA_WORKER", worker);
    }
    let mut child = command.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn fake(scenario: &str) -> String {
    format!(
        "{} {scenario}",
        quirl_lua_testkit::bins::fake_worker().display()
    )
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

#[test]
fn eval_prints_the_result_as_json_and_exits_zero() {
    let output = quirl_lua(Some(&fake("echo")), &["eval", "return 1"], "");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "1\n");
}

#[test]
fn json_flag_prints_the_full_result_record() {
    let output = quirl_lua(Some(&fake("echo")), &["--json", "eval", "return 1"], "");
    assert_eq!(stdout(&output), "{\"ok\":true,\"result\":1}\n");
}

#[test]
fn guest_error_exits_one_with_a_readable_error_on_stderr() {
    let output = quirl_lua(Some(&fake("guest-error")), &["eval", "error('x')"], "");
    assert_eq!(output.status.code(), Some(1));
    assert!(stdout(&output).is_empty());
    assert!(
        stderr(&output).starts_with("error[lua]: guest failed"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn guest_resource_limit_exits_three() {
    let output = quirl_lua(
        Some(&fake("guest-limit")),
        &["eval", "while true do end"],
        "",
    );
    assert_eq!(output.status.code(), Some(3));
}

#[test]
fn deadline_exits_three_and_says_what_happened() {
    let output = quirl_lua(
        Some(&fake("never-answer")),
        &["--wall-time-ms", "100", "eval", "return 1"],
        "",
    );
    assert_eq!(output.status.code(), Some(3));
    let text = stderr(&output);
    assert!(text.contains("error[resource_limit]"), "{text}");
    assert!(text.contains("deadline 100 ms"), "{text}");
    assert!(text.contains("help:"), "{text}");
}

#[test]
fn protocol_violation_exits_four() {
    let output = quirl_lua(
        Some(&fake("wrong-version")),
        &["--json", "eval", "return 1"],
        "",
    );
    assert_eq!(output.status.code(), Some(4));
    let line: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(line["kind"], "protocol_violation");
    assert_eq!(line["error"]["code"], "validation");
}

#[test]
fn crash_exits_four() {
    let output = quirl_lua(Some(&fake("crash")), &["eval", "return 1"], "");
    assert_eq!(output.status.code(), Some(4));
    assert!(stderr(&output).contains("error[lua]"));
}

#[test]
fn usage_errors_exit_two() {
    assert_eq!(
        quirl_lua(None, &["no-such-command"], "").status.code(),
        Some(2)
    );
    assert_eq!(
        quirl_lua(None, &["--memory", "12 parsecs", "eval", "x"], "")
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        quirl_lua(None, &["--wall-time-ms", "0", "eval", "x"], "")
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        quirl_lua(None, &["check", "/nonexistent/file.lua"], "")
            .status
            .code(),
        Some(2)
    );
    let output = quirl_lua(None, &["--worker", "'unterminated", "eval", "x"], "");
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn help_exits_zero_and_documents_exit_codes() {
    let output = quirl_lua(None, &["--help"], "");
    assert_eq!(output.status.code(), Some(0));
    assert!(stdout(&output).contains("Exit codes:"));
    assert!(stdout(&output).contains("QUIRL_LUA_WORKER"));
}

#[test]
fn worker_flag_takes_precedence_over_the_environment() {
    let output = quirl_lua(
        Some(&fake("crash")),
        &["--worker", &fake("echo"), "eval", "return 1"],
        "",
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn batch_answers_every_line_in_order_and_reports_the_first_failure() {
    let input = concat!(
        "{\"op\":\"eval\",\"source\":\"return 1\"}\n",
        "not json\n",
        "\n",
        "{\"op\":\"eval\",\"source\":\"return 2\"}\n",
        "{\"op\":\"frobnicate\"}\n",
    );
    let output = quirl_lua(Some(&fake("echo")), &["batch"], input);
    let lines: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{}", stdout(&output));
    assert_eq!(lines[0], serde_json::json!({"ok": true, "result": 1}));
    assert_eq!(lines[1]["kind"], "invalid_input");
    assert_eq!(lines[2]["ok"], true);
    assert_eq!(lines[3]["kind"], "invalid_input");
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn batch_lines_are_read_strictly_and_each_refusal_names_the_key() {
    let cases = [
        (
            r#"{"op":"eval","sorce":"return 1"}"#,
            "unknown field `sorce` for `eval` (its fields: op, source); did you mean `source`?",
        ),
        (
            r#"{"op":"eval","source":"return 1","env":{"A":"1"}}"#,
            "field `env` does not apply to `eval` (its fields: op, source)",
        ),
        (
            r#"{"op":"eval","source":"return 1","source":"return 2"}"#,
            "line has a duplicate key `source` at line 1 column 41",
        ),
        (
            r#"{"op":"run","source":"x","env":{"A":"1","A":"2"}}"#,
            "line has a duplicate key `env.A` at line 1 column 43",
        ),
        (
            r#"{"op":"command","name":"x","input":[{"k":1,"k":2}]}"#,
            "line has a duplicate key `input[0].k` at line 1 column 46",
        ),
        (
            r#"{"op":"check","file":"x.lua","name":"y"}"#,
            "field `name` does not apply with `file` (give `file`, or `source` with an optional `name`)",
        ),
        (
            r#"{"op":"prompt","name":"p","contxt":{}}"#,
            "unknown field `contxt` for `prompt` (its fields: op, name, context); did you mean `context`?",
        ),
        (
            r#"{"op":"complete","command":"git","zzz":1}"#,
            "unknown field `zzz` for `complete` (its fields: op, command, context)",
        ),
        (r#"["op","eval"]"#, "line is not a JSON object"),
        (r#"{"source":"return 1"}"#, "line has no string field `op`"),
    ];
    let mut input: String = cases.iter().map(|(line, _)| format!("{line}\n")).collect();
    // A well-formed line after them still runs.
    input.push_str("{\"op\":\"eval\",\"source\":\"return 1\"}\n");
    let output = quirl_lua(Some(&fake("echo")), &["batch"], &input);
    let lines: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), cases.len() + 1, "{}", stdout(&output));
    for ((line, message), answer) in cases.iter().zip(&lines) {
        assert_eq!(answer["kind"], "invalid_input", "{line}: {answer}");
        assert_eq!(answer["error"]["message"], *message, "{line}");
    }
    assert_eq!(
        lines[cases.len()],
        serde_json::json!({"ok": true, "result": 1})
    );
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn batch_replaces_a_failed_worker_then_quarantines_the_pool() {
    // The scripted worker crashes on its first request after initialize,
    // so every fresh worker fails too: 1 failure + 1 restart, then quarantine.
    let input = concat!(
        "{\"op\":\"eval\",\"source\":\"return 1\"}\n",
        "{\"op\":\"eval\",\"source\":\"return 2\"}\n",
        "{\"op\":\"eval\",\"source\":\"return 3\"}\n",
    );
    let output = quirl_lua(
        Some(&fake("crash")),
        &["batch", "--max-restarts", "1"],
        input,
    );
    let lines: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["kind"], "worker_crashed");
    assert_eq!(lines[1]["kind"], "worker_crashed");
    assert_eq!(lines[2]["kind"], "quarantined");
    assert_eq!(output.status.code(), Some(4));
}

#[test]
fn interrupt_cancels_the_request_kills_the_worker_and_exits_three() {
    let child = Command::new(CLI)
        .args(["--wall-time-ms", "60000", "eval", "return 1"])
        .env("QUIRL_LUA_WORKER", fake("never-answer"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the CLI has started its worker (so it is past start-up and
    // waiting on the request), bounded.
    let cli_pid = i32::try_from(child.id()).unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while procfs::all_processes().iter().all(|p| p.ppid != cli_pid) {
        assert!(
            std::time::Instant::now() < until,
            "the CLI never started its worker"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let interrupted = std::time::Instant::now();
    // SAFETY: signals our own child, which we have not reaped yet.
    unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    assert!(interrupted.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(stderr(&output).contains("cancelled"), "{}", stderr(&output));
}

#[test]
fn a_stuck_callback_is_killed_at_its_own_deadline_plus_the_slack() {
    // DESIGN §17.6: the segment declares 8 ms; the request's wall time is 5 s.
    // The parent kills at 8 ms + CALLBACK_SLACK, not at the wall time.
    let plugin = std::env::temp_dir().join(format!("quirl-stuck-{}.lua", std::process::id()));
    std::fs::write(&plugin, "-- answered by the scripted worker").unwrap();
    let worker = fake("plugin-then-hang");
    let started = std::time::Instant::now();
    let output = quirl_lua(
        Some(&worker),
        &[
            "--wall-time-ms",
            "5000",
            "plugin",
            plugin.to_str().unwrap(),
            "--prompt",
            "spin",
        ],
        "",
    );
    let elapsed = started.elapsed();
    let _ = std::fs::remove_file(&plugin);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(text.contains("deadline 258 ms"), "{text}");
    // Generous bound; the behaviour is "not the 5 s wall time".
    assert!(
        elapsed < std::time::Duration::from_secs(1),
        "{elapsed:?}: {text}"
    );
}
