//! A tokio host on this crate alone (feature `tokio`; SPEC §3.1, §10, §13.2): spawn the worker
//! contained, initialize, eval with a host call answered by an async fn (typed calls), cancel a
//! stuck request through the host's own `Arc<AtomicBool>`, kill the process group, reap,
//! restart, end cleanly. Prints `42`. Run it with a worker command:
//! `cargo run -p quirl-lua-protocol --features tokio --example tokio_host_minimal -- quirl-worker`

use quirl_lua_protocol::operations::{Eval, Initialize};
use quirl_lua_protocol::records::{CommandOutcome, HostCall, Policy};
use quirl_lua_protocol::tokio_io::ParentClient;
use rustix::process::{Pid, Signal, kill_process_group};
use std::sync::atomic::{AtomicBool, Ordering};
use std::{ffi::OsString, process::Stdio, sync::Arc, time::Duration};
use tokio::process::{Child, ChildStderr, ChildStdin, Command};

type Client = ParentClient<ChildStderr, ChildStdin>;
type Failure = Box<dyn std::error::Error>;

/// SPEC §3.1: piped stdin/stderr, null stdout, own process group, cleared env; then initialize.
/// The client watches the host's own cancellation flag.
async fn start(
    worker: &[OsString],
    policy: Policy,
    cancel: &Arc<AtomicBool>,
) -> Result<(Child, Client), Failure> {
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
    client.cancel_on(Arc::clone(cancel));
    let initialize = Initialize::new(policy).process_enabled(true);
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

/// A typed call: `eval` answers with a JSON value.
async fn eval(client: &mut Client, source: &str) -> Result<serde_json::Value, Failure> {
    let answer = client.call_with_host(Eval::new(source), host).await?;
    Ok(answer.map_err(|record| record.message)?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Failure> {
    let worker: Vec<OsString> = std::env::args_os().skip(1).collect();
    let mut settings = Policy::quirl_script_profile().settings(); // allows quirl.process.run
    settings.instruction_limit = 100_000_000;
    let policy = Policy::new(settings)?;
    let cancel = Arc::new(AtomicBool::new(false));
    let (child, mut client) = start(&worker, policy, &cancel).await?;
    let run = "return tonumber(quirl.process.run('echo 6').value)";
    let six = eval(&mut client, run).await?;
    // The host's own deadline, before the worker's wall time: its flag gives the request up.
    let stop = Arc::clone(&cancel);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.store(true, Ordering::Release);
    });
    match eval(&mut client, "while true do end").await {
        Err(error)
            if error
                .downcast_ref::<quirl_lua_protocol::ProtocolError>()
                .is_some_and(|e| e.is_cancelled()) => {}
        other => return Err(format!("the stuck guest was not cancelled: {other:?}").into()),
    }
    kill(child, client).await?; // the connection is abandoned: `must_kill` (SPEC §13.2)
    cancel.store(false, Ordering::Release); // the next worker starts uncancelled
    let (mut child, mut client) = start(&worker, policy, &cancel).await?; // restart
    println!("{}", eval(&mut client, &format!("return 7 * {six}")).await?);
    client.close_writer().await?; // a clean end (SPEC §3.3): the worker exits 0
    if client.next_event().await?.is_some() || !child.wait().await?.success() {
        return Err("the worker did not end cleanly".into());
    }
    Ok(())
}
