//! The end-of-program sweep of adopted orphans (DESIGN §16.7), in a test
//! binary of its own: adoption is process-wide and lasting.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use quirl_lua_reference_parent::process_host::{adopt_orphans, end_adopted_orphans};

/// Whether `/proc/PID` exists (alive or a zombie).
fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn the_end_sweep_kills_and_reaps_an_orphan_and_is_idle_without_children() {
    adopt_orphans().unwrap();
    // No child at all: nothing to end.
    assert_eq!(end_adopted_orphans(), 0);

    // `sh` starts a sleeper in the background and exits; the sleeper is
    // reparented to this process (the subreaper), which did not spawn it.
    let output = Command::new("sh")
        .args(["-c", "sleep 300 >/dev/null 2>&1 & echo $!"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success());
    let orphan: u32 = String::from_utf8(output.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Reparenting happens when `sh` exits, before `output` returns; the
    // loop only guards against a slow /proc.
    let deadline = Instant::now() + Duration::from_secs(10);
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 1..];
        rest.split_whitespace().nth(1)?.parse().ok()
    };
    while parent_of(orphan) != Some(std::process::id()) {
        assert!(Instant::now() < deadline, "{orphan} was not adopted");
        std::thread::sleep(Duration::from_millis(5));
    }

    assert_eq!(end_adopted_orphans(), 1);
    // Killed and reaped: not even a zombie is left.
    assert!(!exists(orphan), "{orphan} is still in /proc");
    assert_eq!(end_adopted_orphans(), 0);
}
