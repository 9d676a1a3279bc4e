//! What `quirl-lua` prints, as `insta` snapshots (`tests/snapshots/`):
//! `check`'s diagnostics, `--help` and each subcommand's help, error
//! records as the CLI prints them (text and `--json`), and the `stats`
//! JSON. A changed output fails the test; review it with `cargo insta
//! review`, or accept every change with `INSTA_UPDATE=always cargo test -p
//! quirl-lua-cli --test cli_snapshots` (CI sets `CI=true`, where insta
//! never writes a snapshot and a difference is a failure).
//!
//! What depends on the machine is redacted before the comparison: process
//! ids, latencies and the containment report (`[redacted]`), and the
//! `containment:`/`landlock:` context lines of JSON error records. JSON
//! lines keep the CLI's member order, one member per line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use quirl_lua_testkit::scratch::Scratch;
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");

const ISSUE_FILE: &str = "---@parm x number\nlocal function f(x)\n  return quirl.proces.run(\"echo \" .. x)\nend\nprnt(f(1))\nreturn io.open(\"x\")\n";

/// The issue file with its four problems fixed: the tag spelt `@param`,
/// `quirl.process`, the value returned instead of printed, no file opened.
const FIXED_FILE: &str = "---@param x number\nlocal function f(x)\n  return quirl.process.run(\"echo \" .. x)\nend\nreturn f(1)\n";

fn run(dir: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(CLI)
        .args(args)
        .current_dir(dir)
        .env_remove("QUIRL_LUA_WORKER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Exit status, stdout and stderr, as one text.
fn transcript(output: &Output) -> String {
    format!(
        "exit status: {}\n--- stdout\n{}--- stderr\n{}",
        output
            .status
            .code()
            .map_or_else(|| "signal".to_owned(), |code| code.to_string()),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Members whose values depend on the machine or the moment.
const VOLATILE: &[&str] = &[
    "pid",
    "spare_pids",
    "p50_us",
    "p90_us",
    "p99_us",
    "max_us",
    "containment",
];

/// `line` (one JSON value as the CLI printed it) with the values of
/// [`VOLATILE`] members and the `containment:`/`landlock:` context lines
/// replaced by `"[redacted]"`, member order kept.
fn redact(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    'scan: while !rest.is_empty() {
        for key in VOLATILE {
            let member = format!("\"{key}\":");
            if let Some(after) = rest.strip_prefix(member.as_str()) {
                let mut values = serde_json::Deserializer::from_str(after).into_iter::<Value>();
                if let Some(Ok(_)) = values.next() {
                    out.push_str(&member);
                    out.push_str("\"[redacted]\"");
                    rest = &after[values.byte_offset()..];
                    continue 'scan;
                }
            }
        }
        for prefix in ["\"containment: ", "\"landlock: "] {
            if let Some(after) = rest.strip_prefix(prefix)
                && let Some(end) = after.find('"')
            {
                out.push_str(prefix);
                out.push_str("[redacted]\"");
                rest = &after[end + 1..];
                continue 'scan;
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out
}

/// Compact JSON laid out one member per line, in its own order (serde_json
/// would sort the members).
fn pretty(json: &str) -> String {
    let mut out = String::new();
    let mut depth = 0_usize;
    let mut in_string = false;
    let mut escaped = false;
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    let chars: Vec<char> = json.chars().collect();
    for (index, &c) in chars.iter().enumerate() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                if !matches!(chars.get(index + 1), Some('}' | ']')) {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                if !matches!(chars.get(index.wrapping_sub(1)), Some('{' | '[')) {
                    depth = depth.saturating_sub(1);
                    newline(&mut out, depth);
                }
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            _ => out.push(c),
        }
    }
    out
}

/// The exit status and each stdout line, redacted and laid out.
fn json_lines(output: &Output) -> String {
    let mut text = format!("exit status: {}\n", output.status.code().unwrap_or(-1));
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let _: Value = serde_json::from_str(line).unwrap();
        text.push_str(&pretty(&redact(line)));
        text.push('\n');
    }
    text
}

#[test]
fn check_prints_the_issue_files_four_problems_and_exits_one() {
    let dir = Scratch::new("check-issue");
    dir.write("issue.lua", ISSUE_FILE);
    let output = run(dir.path(), &["check", "issue.lua"], "");
    assert_eq!(output.status.code(), Some(1));
    insta::assert_snapshot!("check_issue_file", transcript(&output));
}

#[test]
fn check_of_the_fixed_file_exits_zero() {
    let dir = Scratch::new("check-fixed");
    dir.write("fixed.lua", FIXED_FILE);
    let output = run(dir.path(), &["check", "fixed.lua"], "");
    assert_eq!(output.status.code(), Some(0), "{}", transcript(&output));
    insta::assert_snapshot!("check_fixed_file", transcript(&output));
}

/// Each problem fixed alone removes exactly its own diagnostic; the file
/// fails until all four are fixed.
#[test]
fn each_fix_removes_its_own_diagnostic() {
    let dir = Scratch::new("check-each");
    let fixes = [
        ("---@parm", "---@param", "annotation_tag"),
        ("quirl.proces.", "quirl.process.", "unknown_member"),
        ("prnt(f(1))", "local _shown = f(1)", "undefined_global"),
        (
            "return io.open(\"x\")\n",
            "return f(1)\n",
            "absent_facility",
        ),
    ];
    for (from, to, rule) in fixes {
        dir.write("one.lua", &ISSUE_FILE.replacen(from, to, 1));
        let output = run(dir.path(), &["check", "one.lua"], "");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(!stderr.contains(&format!("[{rule}]")), "{rule}: {stderr}");
        assert!(stderr.contains("one.lua: 3 errors, 0 warnings"), "{stderr}");
    }
}

#[test]
fn check_with_only_warnings_exits_zero_and_prints_them() {
    let dir = Scratch::new("check-warnings");
    dir.write(
        "warn.lua",
        "local unused = 1\nlocal count = 0\ncont = count + 1\n\treturn quirl.cwd(1)\n",
    );
    let output = run(dir.path(), &["check", "warn.lua"], "");
    assert_eq!(output.status.code(), Some(0));
    insta::assert_snapshot!("check_warnings", transcript(&output));
}

#[test]
fn check_of_a_syntax_error_points_at_its_line() {
    let dir = Scratch::new("check-syntax");
    dir.write("bad.lua", "local x = 1\nlocal = 2\nreturn x\n");
    let output = run(dir.path(), &["check", "bad.lua"], "");
    assert_eq!(output.status.code(), Some(1));
    insta::assert_snapshot!("check_syntax_error", transcript(&output));
}

#[test]
fn check_json_prints_the_report_record() {
    let dir = Scratch::new("check-json");
    dir.write("issue.lua", ISSUE_FILE);
    let output = run(dir.path(), &["--json", "check", "issue.lua"], "");
    assert_eq!(output.status.code(), Some(1));
    insta::assert_snapshot!("check_issue_file_json", json_lines(&output));
}

#[test]
fn check_lints_under_the_grants_given() {
    let dir = Scratch::new("check-grants");
    dir.write("load.lua", "return load('return 1')()\n");
    let denied = run(dir.path(), &["check", "load.lua"], "");
    assert_eq!(denied.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&denied.stderr).contains("the grant `lua.load` adds it"),
        "{}",
        transcript(&denied)
    );
    let granted = run(
        dir.path(),
        &["--grant", "lua.load", "check", "load.lua"],
        "",
    );
    assert_eq!(granted.status.code(), Some(0), "{}", transcript(&granted));
}

#[test]
fn help_texts() {
    let dir = Scratch::new("help");
    let output = run(dir.path(), &["--help"], "");
    assert_eq!(output.status.code(), Some(0));
    insta::assert_snapshot!("help", String::from_utf8_lossy(&output.stdout));
    for command in [
        "eval", "run", "config", "check", "test", "plugin", "batch", "stats",
    ] {
        let output = run(dir.path(), &[command, "--help"], "");
        assert_eq!(output.status.code(), Some(0), "{command}");
        insta::assert_snapshot!(
            format!("help_{command}"),
            String::from_utf8_lossy(&output.stdout)
        );
    }
}

#[test]
fn error_records_as_printed() {
    let dir = Scratch::new("errors");
    let cases: [(&str, &[&str]); 5] = [
        ("usage_unreadable_file", &["check", "missing.lua"]),
        ("usage_bad_size", &["--memory", "lots", "eval", "return 1"]),
        ("guest_error", &["eval", "error('boom')"]),
        (
            "instruction_limit",
            &["--instructions", "1000", "eval", "while true do end"],
        ),
        (
            "policy_out_of_range",
            &["--wall-time-ms", "0", "eval", "return 1"],
        ),
    ];
    for (name, args) in cases {
        let output = run(dir.path(), args, "");
        insta::assert_snapshot!(format!("error_{name}"), transcript(&output));
        let mut json_args = vec!["--json"];
        json_args.extend_from_slice(args);
        let output = run(dir.path(), &json_args, "");
        if output.stdout.is_empty() {
            // clap's own usage errors print text only.
            insta::assert_snapshot!(format!("error_{name}_json"), transcript(&output));
        } else {
            insta::assert_snapshot!(format!("error_{name}_json"), json_lines(&output));
        }
    }
}

#[test]
fn stats_json() {
    let dir = Scratch::new("stats");
    let input = concat!(
        r#"{"op":"eval","source":"return 1"}"#,
        "\n",
        r#"{"op":"eval","source":"error('boom')"}"#,
        "\n",
    );
    let output = run(dir.path(), &["stats", "--json"], input);
    // The status of the first failing line (the guest error), as `batch`.
    assert_eq!(output.status.code(), Some(1), "{}", transcript(&output));
    insta::assert_snapshot!("stats_json", json_lines(&output));
}
