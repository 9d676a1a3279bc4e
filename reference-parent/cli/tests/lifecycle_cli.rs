//! `quirl-lua batch` with the lifecycle layer: `--pool`, `--max-restarts`,
//! `--stats` and `--plugin`, against the real worker (the binary itself).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_testkit::procfs;
#[path = "support/lifecycle.rs"]
mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use support::{Scratch, plugin_source};

const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");

/// Runs for minutes on few instructions (each iteration is two native
/// calls over a megabyte), so no instruction budget ends it first.
const ENDLESS_NATIVE: &str =
    "local s = ('x'):rep(1000000) for i = 1, 1e9 do s = s:upper():lower() end";

/// Run `quirl-lua ARGS` with `input` on stdin; return each stdout line
/// (parsed) with the time it arrived, and the exit status.
fn batch(args: &[&str], input: &str) -> (Vec<(Value, Instant)>, Option<i32>, String) {
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
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let lines = stdout
        .lines()
        .map(|line| {
            let line = line.unwrap();
            (
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")),
                Instant::now(),
            )
        })
        .collect();
    let output = child.wait_with_output().unwrap();
    (
        lines,
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn eval_line(source: &str) -> String {
    format!("{}\n", serde_json::json!({"op": "eval", "source": source}))
}

#[test]
fn six_endless_loops_give_four_deadlines_then_two_quarantine_errors_and_stats() {
    let input = eval_line("while true do end").repeat(6);
    let (lines, status, stderr) = batch(
        &[
            "--wall-time-ms",
            "50",
            "batch",
            "--max-restarts",
            "3",
            "--stats",
        ],
        &input,
    );
    assert_eq!(lines.len(), 7, "{lines:?} {stderr}");
    for (line, _) in &lines[..4] {
        assert_eq!(line["kind"], "deadline", "{line}");
        assert_eq!(line["error"]["code"], "resource_limit");
    }
    for (line, _) in &lines[4..6] {
        assert_eq!(line["kind"], "quarantined", "{line}");
    }
    // The quarantine errors come at once (generous: the bound is the behaviour).
    let gap = lines[5].1 - lines[3].1;
    assert!(gap < Duration::from_millis(100), "took {gap:?}");
    let stats = &lines[6].0;
    assert_eq!(stats["quarantined"], true, "{stats}");
    assert_eq!(stats["restarts"], 3, "{stats}");
    assert_eq!(stats["timeouts"], 4, "{stats}");
    assert_eq!(stats["rejected"], 2, "{stats}");
    assert_eq!(stats["members"][0]["restarts"], 3, "{stats}");
    assert_eq!(
        status,
        Some(3),
        "the first failing line decides: a deadline"
    );
}

#[test]
fn a_pool_of_two_answers_in_input_order() {
    // The first line is slow and the second fast: the second finishes first
    // on the other worker but is printed second.
    let slow = "local x = 0 for i = 1, 3000000 do x = x + 1 end return 'slow'";
    let input = [slow, "return 'fast'", "return 'third'", "return 'fourth'"]
        .map(eval_line)
        .concat();
    let (lines, status, stderr) = batch(&["batch", "--pool", "2", "--stats"], &input);
    assert_eq!(status, Some(0), "{stderr}");
    let results: Vec<&Value> = lines[..4].iter().map(|(line, _)| &line["result"]).collect();
    assert_eq!(results, ["slow", "fast", "third", "fourth"]);
    let stats = &lines[4].0;
    assert_eq!(stats["pool_size"], 2);
    assert_eq!(stats["invocations"], 4);
    assert_eq!(stats["successes"], 4);
    let busy_members = stats["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|member| member["invocations"].as_u64().unwrap() > 0)
        .count();
    assert_eq!(busy_members, 2, "the fast lines ran beside the slow one");
}

#[test]
fn batch_lines_call_the_callbacks_of_a_plugin_on_every_member() {
    let scratch = Scratch::new("cli-plugin");
    let path = scratch.write("prompt.lua", &plugin_source("v7"));
    let line = "{\"op\":\"prompt\",\"name\":\"version\"}\n".repeat(4);
    let (lines, status, stderr) = batch(
        &[
            "batch",
            "--plugin",
            path.to_str().unwrap(),
            "--pool",
            "2",
            "--stats",
        ],
        &line,
    );
    assert_eq!(status, Some(0), "{stderr}");
    for (line, _) in &lines[..4] {
        assert_eq!(line["result"], "v7", "{line}");
    }
    let stats = &lines[4].0;
    assert_eq!(stats["name"], path.to_str().unwrap());
    assert_eq!(stats["generation"], 1);
    assert_eq!(stats["successes"], 4);
}

#[test]
fn a_plugin_that_does_not_load_fails_the_batch_before_any_line() {
    let scratch = Scratch::new("cli-bad-plugin");
    let path = scratch.write("broken.lua", "local x = = 1\n");
    let (lines, status, stderr) = batch(
        &["batch", "--plugin", path.to_str().unwrap()],
        &eval_line("return 1"),
    );
    assert!(lines.is_empty(), "{lines:?}");
    assert_eq!(status, Some(1), "a guest (syntax) error: {stderr}");
    assert!(stderr.contains("while starting plugin"), "{stderr}");
}

#[test]
fn pool_size_and_restart_budget_are_range_checked() {
    for args in [
        &["batch", "--pool", "0"][..],
        &["batch", "--pool", "65"],
        &["batch", "--max-restarts", "-1"],
        &["batch", "--spares", "9"],
    ] {
        let (lines, status, _) = batch(args, "");
        assert!(lines.is_empty());
        assert_eq!(status, Some(2), "{args:?}");
    }
}

#[test]
fn a_finished_batch_leaves_no_worker_behind() {
    let (lines, status, stderr) = batch(
        &["batch", "--pool", "3", "--spares", "1", "--stats"],
        &eval_line("local s = 0 for i = 1, 3000000 do s = s + i end return s"),
    );
    assert_eq!(status, Some(0), "{stderr}");
    let stats = &lines[1].0;
    // The warm spare (DESIGN §17.7) is a worker too; it is reaped with them.
    assert_eq!(stats["spare_capacity"], 1, "{stats}");
    for pid in stats["spare_pids"].as_array().unwrap() {
        let pid = i32::try_from(pid.as_u64().unwrap()).unwrap();
        assert!(
            procfs::living_members_after(pid, Duration::from_secs(2)).is_empty(),
            "spare {pid} outlived quirl-lua"
        );
    }
    for member in stats["members"].as_array().unwrap() {
        let pid = i32::try_from(member["pid"].as_u64().unwrap()).unwrap();
        assert!(
            procfs::living_members_after(pid, Duration::from_secs(2)).is_empty(),
            "worker {pid} outlived quirl-lua"
        );
    }
}

#[test]
fn an_interrupt_cancels_every_busy_member_and_the_remaining_lines() {
    let mut child = Command::new(CLI)
        .args(["--wall-time-ms", "60000", "batch", "--pool", "2", "--stats"])
        .env_remove("QUIRL_LUA_WORKER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cli_pid = i32::try_from(child.id()).unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(eval_line(ENDLESS_NATIVE).repeat(4).as_bytes())
        .unwrap();
    // Both workers are in their loop: each has used 50 ms of CPU, which
    // start-up never does (bounded wait).
    let both_busy = support::eventually(Duration::from_secs(10), || {
        procfs::all_processes()
            .iter()
            .filter(|p| p.ppid == cli_pid && user_ticks(p.pid) >= 5)
            .count()
            == 2
    });
    assert!(both_busy, "the two workers never ran at the same time");
    let workers: Vec<i32> = procfs::all_processes()
        .iter()
        .filter(|p| p.ppid == cli_pid)
        .map(|p| p.pid)
        .collect();
    // SAFETY: signals the child we spawned, by its pid.
    assert_eq!(unsafe { libc::kill(cli_pid, libc::SIGINT) }, 0);
    let output = child.wait_with_output().unwrap();
    let lines: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "{lines:?}");
    for line in &lines[..4] {
        assert_eq!(line["kind"], "cancelled", "{line}");
    }
    assert_eq!(
        lines[4]["quarantined"], false,
        "cancellations are not failures"
    );
    assert_eq!(output.status.code(), Some(3));
    for pid in workers {
        assert!(procfs::living_members_after(pid, Duration::from_secs(2)).is_empty());
    }
}

/// User CPU time of `pid` in clock ticks (`/proc/PID/stat` field 14).
fn user_ticks(pid: i32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    stat.rfind(')')
        .and_then(|close| stat[close + 2..].split_ascii_whitespace().nth(11))
        .and_then(|ticks| ticks.parse().ok())
        .unwrap_or(0)
}
