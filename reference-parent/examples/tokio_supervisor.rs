//! The async supervisor (feature `tokio`): spawn a contained worker, eval, answer a host call
//! with an async fn, deadline → kill → restart, clean end. Prints `42`. SPEC §13.2, §17.
//! `cargo run -p quirl-lua-reference-parent --features tokio --example tokio_supervisor -- target/debug/quirl-worker`
use quirl_lua_protocol::records::{CommandOutcome, HostCall};
use quirl_lua_reference_parent::tokio_worker::Worker;
use quirl_lua_reference_parent::{ErrorClass, Policy, PolicySettings, WorkerCommand, WorkerConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let program = args
        .next()
        .ok_or("usage: tokio_supervisor WORKER-COMMAND [ARGS...]")?;
    let command = args.fold(WorkerCommand::new(program), WorkerCommand::arg);
    let (memory_limit_bytes, instruction_limit, wall_time_ms) = (32 << 20, 100_000_000, 200);
    let policy = Policy::new(PolicySettings {
        allow_process: true,
        memory_limit_bytes,
        instruction_limit,
        wall_time_ms,
    })?;
    // Own process group (or cgroup), cleared environment; initialized on return.
    let mut worker = Worker::spawn(WorkerConfig::new(command, policy)).await?;
    worker.eval("x = 6").await?;
    // `quirl.process.run` is a host call: answered here by an async fn, inside the deadline.
    let host = async |call: &HostCall| {
        tokio::task::yield_now().await; // e.g. a database query or an async process run
        Ok(CommandOutcome {
            status: 0,
            stdout: Some(call.command.len().to_string()),
            stderr: None,
        })
    };
    let seven = worker
        .eval_with_host("return tonumber(quirl.process.run('seven').value)", host)
        .await?;
    // Past the 200 ms deadline the worker's whole tree is killed, reaped and the handle poisoned.
    match worker.eval("while true do end").await {
        Err(error) if error.class() == ErrorClass::Deadline => {}
        other => return Err(format!("expected a deadline error, got {other:?}").into()),
    }
    worker.restart().await?; // a fresh worker from the same configuration
    let answer = worker.eval(&format!("return 6 * {seven}")).await?;
    println!("{answer}");
    worker.shutdown().await?; // close stdin; the worker exits 0 and is reaped
    Ok(())
}
