//! `quirl-lua stats --json`: runs batch lines and prints only the pool's
//! stats (DESIGN §17.7), against the real worker (the binary itself).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");

fn stats(args: &[&str], input: &str) -> (Vec<Value>, Option<i32>) {
    let mut child = Command::new(CLI)
        .args(args)
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
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let lines = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (lines, output.status.code())
}

#[test]
fn stats_prints_only_the_stats_line_with_every_p8_field() {
    let input = concat!(
        r#"{"op":"eval","source":"return 1"}"#,
        "\n",
        r#"{"op":"eval","source":"error('boom')"}"#,
        "\n",
        r#"{"op":"eval","source":"while true do end"}"#,
        "\n",
    );
    let (lines, status) = stats(&["--wall-time-ms", "200", "stats", "--json"], input);
    assert_eq!(lines.len(), 1, "only the stats line: {lines:?}");
    let stats = &lines[0];
    assert_eq!(stats["invocations"], 3, "{stats}");
    assert_eq!(stats["successes"], 1, "{stats}");
    assert_eq!(stats["guest_errors"], 1, "{stats}");
    assert_eq!(stats["timeouts"], 1, "{stats}");
    assert_eq!(stats["quarantined"], false, "{stats}");
    assert_eq!(stats["last_error_code"], "resource_limit", "{stats}");
    for field in ["name", "generation", "crashes", "restarts", "latency"] {
        assert!(stats.get(field).is_some(), "missing {field}: {stats}");
    }
    let member = &stats["members"][0];
    for field in ["pid", "running", "generation", "invocations"] {
        assert!(
            member.get(field).is_some(),
            "member lacks {field}: {member}"
        );
    }
    // As with batch, the exit status is that of the first failing line
    // (the guest error: 1).
    assert_eq!(status, Some(1));
}

#[test]
fn stats_with_no_lines_reports_an_idle_pool() {
    let (lines, status) = stats(&["stats", "--json", "--pool", "2"], "");
    assert_eq!(status, Some(0));
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["invocations"], 0);
    assert_eq!(lines[0]["members"].as_array().unwrap().len(), 2);
}
