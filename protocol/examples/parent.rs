//! A minimal blocking parent: spawns the worker command given as arguments,
//! initializes it, evaluates `return 6 * 7` with a typed call and prints the
//! result (`42`); then ends a runaway request through the host's own
//! `Arc<AtomicBool>` (as a Ctrl-C handler would set it) and kills the
//! worker's process group (SPEC §13.2).
//!
//! ```sh
//! cargo run -p quirl-lua-protocol --example parent -- target/x86_64-unknown-linux-gnu/release/quirl-worker
//! cargo run -p quirl-lua-protocol --example parent -- target/x86_64-unknown-linux-gnu/release/quirl-lua --internal-lua-worker-v1
//! ```

use quirl_lua_protocol::blocking::ParentClient;
use quirl_lua_protocol::operations::{Eval, Initialize};
use quirl_lua_protocol::records::{Policy, PolicySettings};
use rustix::process::{Pid, Signal, kill_process_group};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let program = args
        .next()
        .ok_or("usage: parent WORKER-COMMAND [ARGS...]")?;
    // SPEC §3.1: requests on stdin, frames on stderr, stdout to /dev/null,
    // a process group of its own and a cleared environment.
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let (Some(stdin), Some(stderr)) = (child.stdin.take(), child.stderr.take()) else {
        return Err("the worker's stdin and stderr are piped".into());
    };
    let mut worker = ParentClient::new(stderr, stdin);
    // The host's own cancellation flag; the client watches it.
    let interrupted = Arc::new(AtomicBool::new(false));
    worker.cancel_on(Arc::clone(&interrupted));

    let policy = Policy::new(PolicySettings {
        wall_time_ms: 10_000,
        instruction_limit: 100_000_000,
        ..Policy::quirl_config_profile().settings()
    })?;
    worker
        .call(Initialize::new(policy))?
        .map_err(|record| format!("initialize failed: {record}"))?;
    // A typed call: `eval` answers with a JSON value, nothing to match.
    let answer = worker
        .call(Eval::new("return 6 * 7"))?
        .map_err(|record| format!("eval failed: {record}"))?;
    println!("{answer}");

    // A request that would run until the wall time: the host gives it up.
    let stop = Arc::clone(&interrupted);
    let interrupter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Release);
    });
    let runaway = worker.call(Eval::new("while true do end"));
    interrupter
        .join()
        .map_err(|_| "the interrupting thread panicked")?;
    match runaway {
        Err(error) if error.is_cancelled() => {}
        other => return Err(format!("the runaway request was not cancelled: {other:?}").into()),
    }
    // The connection is abandoned (`must_kill`): close stdin, kill the
    // group while the worker is unreaped, reap (SPEC §13.2).
    let kill = worker.connection().must_kill();
    drop(worker);
    let pid = Pid::from_child(&child);
    if kill {
        kill_process_group(pid, Signal::KILL)?;
    }
    let status = child.wait()?;
    Ok(if kill || status.success() {
        ExitCode::SUCCESS
    } else {
        eprintln!("the worker exited with {status}");
        ExitCode::FAILURE
    })
}
