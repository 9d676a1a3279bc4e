//! The async supervisor (feature `tokio`, SPEC §13.2, DESIGN §17): a contained worker, an async host
//! call, deadline → kill → a fresh worker on the next call, clean end; prints `42`.
//! Run: `… -- target/x86_64-unknown-linux-gnu/debug/quirl-worker`
use quirl_lua_protocol::records::{CommandOutcome, HostCall};
use quirl_lua_reference_parent::tokio_worker::{ContainedHost, Worker};
use quirl_lua_reference_parent::{ErrorClass, Policy, WorkerCommand, WorkerConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let program = args.next().ok_or("usage: WORKER [ARGS]")?;
    let command = args.fold(WorkerCommand::new(program), WorkerCommand::arg);
    let mut settings = Policy::quirl_script_profile().settings(); // allows quirl.process.run
    settings.wall_time_ms = 200;
    // Its own process group (or cgroup), a cleared environment; initialized on return.
    let mut worker = Worker::spawn(WorkerConfig::new(command, Policy::new(settings)?)).await?;
    // `quirl.process.run` is a host call, answered by an async fn inside the deadline
    // (`contained.run(call).await` would hand it to the contained process host).
    let host = async |call: &HostCall, _contained: &ContainedHost| {
        tokio::task::yield_now().await; // e.g. an async process run or a query
        let stdout = call.command.strip_prefix("echo ").map(str::to_owned);
        Ok(CommandOutcome {
            status: 0,
            stdout,
            stderr: None,
        })
    };
    let run = "return tonumber(quirl.process.run('echo 7').value)";
    let seven = worker.eval_with_host(run, host).await?;
    // A host call that never answers: the deadline (§10) kills the worker's whole tree.
    let never = async |_: &HostCall, _: &ContainedHost| std::future::pending().await;
    let stuck = worker.eval_with_host("quirl.process.run('x')", never);
    match stuck.await {
        Err(error) if error.class() == ErrorClass::Deadline => {}
        other => return Err(format!("expected a deadline error, got {other:?}").into()),
    }
    // The next call runs on a fresh worker from the same configuration.
    println!("{}", worker.eval(&format!("return 6 * {seven}")).await?);
    worker.shutdown().await?; // closes stdin: the worker exits 0 and is reaped
    Ok(())
}
