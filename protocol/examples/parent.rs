//! A minimal blocking parent: spawns the worker command given as arguments,
//! initializes it, evaluates `return 6 * 7` and prints the result (`42`).
//!
//! ```sh
//! cargo run -p quirl-lua-protocol --example parent -- target/x86_64-unknown-linux-gnu/release/quirl-worker
//! cargo run -p quirl-lua-protocol --example parent -- target/x86_64-unknown-linux-gnu/release/quirl-lua --internal-lua-worker-v1
//! ```

use quirl_lua_protocol::blocking::ParentClient;
use quirl_lua_protocol::records::{Operation, OperationResult, Policy};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};

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

    let policy = Policy::quirl_config_profile();
    if let Err(record) = worker.call(Operation::initialize(policy, None, false))? {
        return Err(format!("initialize failed: {}", record.message).into());
    }
    let source = "return 6 * 7".to_owned();
    match worker.call(Operation::Eval { source })? {
        Ok(OperationResult::Value(value)) => println!("{value}"),
        Ok(other) => return Err(format!("unexpected result {other:?}").into()),
        Err(record) => return Err(format!("eval failed: {}", record.message).into()),
    }

    drop(worker); // closes the worker's stdin: a clean end (SPEC §3.3)
    let status = child.wait()?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        eprintln!("the worker exited with {status}");
        ExitCode::FAILURE
    })
}
