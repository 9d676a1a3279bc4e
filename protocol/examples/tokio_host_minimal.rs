//! A tokio host on this crate alone (feature `tokio`; SPEC §3.1, §10, §13.2): spawn the worker
//! contained, initialize, eval with a host call answered by an async fn, kill the process group
//! at a deadline, reap, restart, end cleanly. Prints `42`. Run it with a worker command:
//! `cargo run -p quirl-lua-protocol --features tokio --example tokio_host_minimal -- quirl-worker`

use quirl_lua_protocol::records::{CommandOutcome, HostCall, Operation, OperationResult, Policy};
use quirl_lua_protocol::tokio_io::ParentClient;
use rustix::process::{Pid, Signal, kill_process_group};
use std::{ffi::OsString, process::Stdio, time::Duration};
use tokio::process::{Child, ChildStderr, ChildStdin, Command};

type Client = ParentClient<ChildStderr, ChildStdin>;
type Failure = Box<dyn std::error::Error>;

/// SPEC §3.1: piped stdin/stderr, null stdout, own process group, cleared env; then initialize.
async fn start(worker: &[OsString], policy: Policy) -> Result<(Child, Client), Failure> {
    let (program, args) = worker.split_first().ok_or("usage: WORKER [ARGS...]")?;
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
    let mut client = ParentClient::new(stderr, stdin);
    let initialize = Operation::initialize(policy, None, true);
    client.call(initialize).await?.map_err(|e| e.message)?;
    Ok((child, client))
}

/// SPEC §13.2: close stdin, kill the group while unreaped (its pid pins the id), reap, drain.
async fn kill(mut child: Child, client: Client) -> Result<(), Failure> {
    let (_, mut stderr, stdin) = client.into_parts();
    drop(stdin);
    let id = i32::try_from(child.id().ok_or("the worker was reaped already")?)?;
    kill_process_group(Pid::from_raw(id).ok_or("pid 0")?, Signal::KILL)?;
    child.wait().await?;
    tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await?;
    Ok(())
}

/// `quirl.process.run` is a host call: answered by an async fn, inside the request's deadline.
async fn host(call: &HostCall) -> Result<CommandOutcome, quirl_lua_protocol::records::ShellError> {
    tokio::task::yield_now().await; // e.g. an async process run or a query
    let stdout = call.command.strip_prefix("echo ").map(str::to_owned);
    let (status, stderr) = (0, None);
    Ok(CommandOutcome {
        status,
        stdout,
        stderr,
    })
}

async fn eval(client: &mut Client, source: String) -> Result<serde_json::Value, Failure> {
    let answer = client.call_with_host(Operation::Eval { source }, host);
    match answer.await? {
        Ok(OperationResult::Value(value)) => Ok(value),
        other => Err(format!("unexpected answer {other:?}").into()),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Failure> {
    let worker: Vec<OsString> = std::env::args_os().skip(1).collect();
    let mut settings = Policy::quirl_script_profile().settings(); // allows quirl.process.run
    settings.instruction_limit = 100_000_000;
    let policy = Policy::new(settings)?;
    let (child, mut client) = start(&worker, policy).await?;
    let run = "return tonumber(quirl.process.run('echo 6').value)";
    let six = eval(&mut client, run.into()).await?;
    // The host's own deadline, before the worker's wall time: give the request up, kill.
    let stuck = eval(&mut client, "while true do end".into());
    let host_deadline = Duration::from_millis(100);
    if tokio::time::timeout(host_deadline, stuck).await.is_ok() {
        return Err("the stuck guest answered".into());
    }
    client.cancel(); // the connection is abandoned: `must_kill` (SPEC §13.2)
    kill(child, client).await?;
    let (mut child, mut client) = start(&worker, policy).await?; // restart
    println!("{}", eval(&mut client, format!("return 7 * {six}")).await?);
    client.close_writer().await?; // a clean end (SPEC §3.3): the worker exits 0
    if client.next_event().await?.is_some() || !child.wait().await?.success() {
        return Err("the worker did not end cleanly".into());
    }
    Ok(())
}
