//! `quirl-conformance decode` as a process: stdin in, one line per frame out.
//!
//! The main test runs the binary over every golden fixture and checks that
//! its report agrees with the manifest: `frames` lines of `ok <json>` whose
//! JSON, framed again, gives back the canonical bytes, then (for rejects)
//! exactly one `error <code> …` line; exit status 0 for accepts, 1 for rejects.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Run the binary with `args`, feeding `input` on stdin; the child is always reaped.
fn run(args: &[&str], input: &[u8]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_quirl-conformance"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // A separate writer: the child may stop reading early (first error) or
    // write while we still write, so neither side may block the other.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn read(file: &str) -> Vec<u8> {
    std::fs::read(fixtures_dir().join(file)).unwrap()
}

fn direction_arg(direction: &str) -> &'static str {
    match direction {
        "parent_to_worker" => "parent-to-worker",
        "worker_to_parent" => "worker-to-parent",
        other => panic!("bad direction {other}"),
    }
}

#[test]
fn quirl_published_request_decodes_to_itself() {
    let input = read("frames/quirl_request_fixture_v1.bin");
    let run = run(&["decode", "--direction", "parent-to-worker"], &input);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.stdout,
        "ok {\"kind\":\"request\",\"request\":{\"version\":1,\"id\":7,\"operation\":\
         {\"operation\":\"eval\",\"source\":\"return 42\"}}}\n"
    );
}

#[test]
fn non_canonical_input_is_printed_canonically() {
    let input = read("frames/order_frame_tag_last.bin");
    let run = run(&["decode", "--direction", "parent-to-worker"], &input);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let canonical = read("frames/order_frame_tag_last.canonical.bin");
    assert_eq!(
        run.stdout.as_bytes(),
        [b"ok ", &canonical[4..], b"\n"].concat()
    );
}

#[test]
fn a_rejected_frame_ends_the_stream_with_exit_status_one() {
    let input = read("frames/stream_second_frame_malformed.bin");
    let run = run(&["decode", "--direction", "worker-to-parent"], &input);
    assert_eq!(run.code, Some(1));
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(lines[0].starts_with("ok {\"kind\":\"response\""));
    assert!(
        lines[1].starts_with("error malformed_json "),
        "{}",
        lines[1]
    );
}

#[test]
fn a_huge_header_then_eof_is_a_truncated_frame() {
    let input = read("frames/frame_length_cap_then_stall.bin");
    let run = run(&["decode", "--direction", "parent-to-worker"], &input);
    assert_eq!(run.code, Some(1));
    assert!(
        run.stdout.starts_with("error truncated_frame "),
        "{}",
        run.stdout
    );
    assert_eq!(run.stdout.lines().count(), 1);
}

#[test]
fn empty_input_is_success_without_output() {
    let run = run(&["decode", "--direction", "worker-to-parent"], b"");
    assert_eq!(run.code, Some(0));
    assert_eq!(run.stdout, "");
}

#[test]
fn usage_errors_exit_with_two() {
    for args in [
        &["decode"][..],
        &["decode", "--direction", "sideways"][..],
        &["decode", "--direction", "parent_to_worker"][..],
        &[][..],
    ] {
        let run = run(args, b"");
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{args:?}");
    }
}

#[test]
fn every_fixture_is_reported_as_the_manifest_says() {
    let text = std::fs::read_to_string(fixtures_dir().join("manifest.json")).unwrap();
    let entries: Vec<Value> = serde_json::from_str(&text).unwrap();
    let mut failures = Vec::new();
    for entry in &entries {
        let file = entry["file"].as_str().unwrap();
        let direction = direction_arg(entry["direction"].as_str().unwrap());
        let frames = usize::try_from(entry["frames"].as_u64().unwrap()).unwrap();
        let accept = entry["expect"] == "accept";
        let input = read(file);
        let run = run(&["decode", "--direction", direction], &input);
        let lines: Vec<&str> = run.stdout.lines().collect();
        let ok_lines: Vec<&str> = lines
            .iter()
            .filter_map(|line| line.strip_prefix("ok "))
            .collect();
        if ok_lines.len() != frames {
            failures.push(format!(
                "{file}: {} ok line(s), want {frames}",
                ok_lines.len()
            ));
        }
        if accept {
            let canonical = entry["canonical_file"].as_str().map_or(input.clone(), read);
            let mut reframed = Vec::new();
            for json in &ok_lines {
                let length = u32::try_from(json.len()).unwrap();
                reframed.extend_from_slice(&length.to_be_bytes());
                reframed.extend_from_slice(json.as_bytes());
            }
            if run.code != Some(0) || lines.len() != frames || reframed != canonical {
                failures.push(format!(
                    "{file}: exit {:?}, {} line(s), canonical match {}",
                    run.code,
                    lines.len(),
                    reframed == canonical
                ));
            }
        } else {
            let code = entry["code"].as_str().unwrap();
            let last = lines.last().copied().unwrap_or("");
            let expected = format!("error {code} ");
            if run.code != Some(1) || lines.len() != frames + 1 || !last.starts_with(&expected) {
                failures.push(format!(
                    "{file}: exit {:?}, last line {:?}, want `{expected}…` after {frames} ok line(s)",
                    run.code,
                    last.chars().take(160).collect::<String>()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fixtures:\n{}",
        failures.len(),
        entries.len(),
        failures.join("\n")
    );
}
