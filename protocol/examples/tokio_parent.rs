//! The `parent` example on tokio: spawns the worker command given as
//! arguments, evaluates `return 6 * 7` with a typed call and prints `42`;
//! then a runaway request is cancelled through the host's own
//! `Arc<AtomicBool>` and the worker's process group is killed (SPEC §13.2).
//!
//! ```sh
//! cargo run -p quirl-lua-protocol --features tokio --example tokio_parent -- target/x86_64-unknown-linux-gnu/release/quirl-worker
//! ```

use quirl_lua_protocol::operations::{Eval, Initialize};
use quirl_lua_protocol::records::{Policy, PolicySettings};
use quirl_lua_protocol::tokio_io::ParentClient;
use rustix::process::{Pid, Signal, kill_process_group};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::process::Command;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let program = args
        .next()
        .ok_or("usage: tokio_parent WORKER-COMMAND [ARGS...]")?;
    // SPEC §3.1: a process group of its own and a cleared environment.
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let (Some(stdin), Some(stderr)) = (child.stdin.take(), child.stderr.take()) else {
        return Err("the worker's stdin and stderr are piped".into());
    };
    let mut worker = ParentClient::new(stderr, stdin);
    // The host's own flag (a Ctrl-C handler, a UI's stop button …).
    let interrupted = Arc::new(AtomicBool::new(false));
    worker.cancel_on(Arc::clone(&interrupted));

    let policy = Policy::new(PolicySettings {
        wall_time_ms: 10_000,
        instruction_limit: 100_000_000,
        ..Policy::quirl_config_profile().settings()
    })?;
    worker
        .call(Initialize::new(policy))
        .await?
        .map_err(|record| format!("initialize failed: {record}"))?;
    let answer = worker
        .call(Eval::new("return 6 * 7"))
        .await?
        .map_err(|record| format!("eval failed: {record}"))?;
    println!("{answer}");

    // Another task sets the flag; the waiting call sees it within a
    // millisecond (CANCEL_CHECK_INTERVAL).
    let stop = Arc::clone(&interrupted);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.store(true, Ordering::Release);
    });
    match worker.call(Eval::new("while true do end")).await {
        Err(error) if error.is_cancelled() => {}
        other => return Err(format!("the runaway request was not cancelled: {other:?}").into()),
    }
    // Abandoned: kill the group while the worker is unreaped, then reap.
    let id = child.id().ok_or("the worker was reaped already")?;
    kill_process_group(
        Pid::from_raw(i32::try_from(id)?).ok_or("pid 0")?,
        Signal::KILL,
    )?;
    drop(worker);
    child.wait().await?;
    Ok(ExitCode::SUCCESS)
}
