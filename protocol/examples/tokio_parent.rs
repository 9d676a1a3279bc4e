//! The `parent` example on tokio: spawns the worker command given as
//! arguments, evaluates `return 6 * 7` with a timeout and prints `42`.
//!
//! ```sh
//! cargo run -p quirl-lua-protocol --features tokio --example tokio_parent -- target/x86_64-unknown-linux-gnu/release/quirl-worker
//! ```

use quirl_lua_protocol::ParentEvent;
use quirl_lua_protocol::records::{Operation, OperationResult, Policy};
use quirl_lua_protocol::tokio_io::ParentClient;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};
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

    let policy = Policy::quirl_config_profile();
    if let Err(record) = worker
        .call(Operation::initialize(policy, None, false))
        .await?
    {
        return Err(format!("initialize failed: {}", record.message).into());
    }
    // The same request step by step, with a deadline on the answer.
    worker
        .request(Operation::Eval {
            source: "return 6 * 7".to_owned(),
        })
        .await?;
    match worker
        .next_event_before(Instant::now() + Duration::from_secs(5))
        .await?
    {
        Some(ParentEvent::Response {
            result: Ok(OperationResult::Value(value)),
            ..
        }) => println!("{value}"),
        other => return Err(format!("unexpected answer {other:?}").into()),
    }

    drop(worker); // closes the worker's stdin: a clean end
    let status = child.wait().await?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        eprintln!("the worker exited with {status}");
        ExitCode::FAILURE
    })
}
