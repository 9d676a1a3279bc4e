//! Untrusted Lua snippets on an async pool (feature `tokio`, DESIGN §17):
//! one snippet per stdin line, run on a pool of 2 workers with a 200 ms
//! deadline, 2,000,000 instructions and 8 MiB each; `quirl.process.run`
//! may start `sleep` and `echo`, run by the contained process host. Prints
//! one JSON line per snippet, in input order, then the pool's stats.
//!
//! ```text
//! printf '%s\n' 'return 6 * 7' 'while true do end' | \
//!   cargo run -p quirl-lua-reference-parent --features tokio --example tokio_pool -- \
//!   target/x86_64-unknown-linux-gnu/debug/quirl-worker
//! {"line":1,"ok":42}
//! {"line":2,"class":"limit","limit":"instructions","ms":21}
//! {"name":"snippets",…,"restarts":1,…,"limit_trips":1,…}
//! ```
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quirl_lua_reference_parent::lifecycle::PoolOptions;
use quirl_lua_reference_parent::tokio_worker::WorkerPool;
use quirl_lua_reference_parent::{
    Error, ErrorClass, Policy, PolicySettings, WorkerCommand, WorkerConfig,
};
use serde::Serialize;
use serde_json::Value;
use tokio::io::AsyncBufReadExt;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The worker is a program of its own: an installed `quirl-worker`, or
    // `quirl-lua --internal-lua-worker-v1` (never this program itself).
    let mut args = std::env::args_os().skip(1);
    let program = args
        .next()
        .ok_or("usage: tokio_pool WORKER [ARGS...] < snippets")?;
    let command = args.fold(WorkerCommand::new(program), WorkerCommand::arg);
    let policy = Policy::new(PolicySettings {
        allow_process: true,
        memory_limit_bytes: 8 << 20,
        instruction_limit: 2_000_000,
        wall_time_ms: 200,
    })?;
    let grants = vec!["process.spawn:sleep".into(), "process.spawn:echo".into()];
    let config = WorkerConfig::new(command, policy).with_grants(grants);
    let pool =
        Arc::new(WorkerPool::start("snippets", config, PoolOptions::new().with_size(2)).await?);

    // A few snippets in flight at once; answers are printed in input order.
    let mut in_flight = VecDeque::new();
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut number = 0_u64;
    while let Some(source) = lines.next_line().await? {
        number += 1;
        let pool = Arc::clone(&pool);
        in_flight.push_back(tokio::spawn(async move {
            let started = Instant::now();
            let result = pool.eval(&source).await;
            answer(number, result, started.elapsed())
        }));
        if in_flight.len() >= 4
            && let Some(oldest) = in_flight.pop_front()
        {
            emit(&oldest.await?)?;
        }
    }
    for task in in_flight {
        emit(&task.await?)?;
    }
    emit(&serde_json::to_string(&pool.stats())?)?;
    // Every worker and spare is ended and reaped before the program exits.
    let report = pool.shutdown(Duration::from_secs(3)).await;
    if !report.is_clean() {
        return Err(format!("unclean shutdown: {report:?}").into());
    }
    Ok(())
}

/// Print one line (an error, not a panic, when stdout is closed).
fn emit(line: &str) -> std::io::Result<()> {
    use std::io::Write;
    writeln!(std::io::stdout(), "{line}")
}

/// One output line: `{"line":N,"ok":VALUE}`, or
/// `{"line":N,"class":…,"limit":…,"ms":…}`.
#[derive(Serialize)]
#[serde(untagged)]
enum Answer {
    Ok {
        line: u64,
        ok: Value,
    },
    Failed {
        line: u64,
        class: &'static str,
        limit: Option<&'static str>,
        ms: u128,
    },
}

fn answer(line: u64, result: Result<Value, Error>, elapsed: Duration) -> String {
    let answer = match result {
        Ok(ok) => Answer::Ok { line, ok },
        Err(error) => Answer::Failed {
            line,
            class: match error.class() {
                ErrorClass::Guest | ErrorClass::InvalidInput => "guest",
                ErrorClass::Limit => "limit",
                ErrorClass::Deadline | ErrorClass::Cancelled => "deadline",
                ErrorClass::WorkerCrashed | ErrorClass::ProtocolViolation | ErrorClass::Spawn => {
                    "crash"
                }
                _ => "unavailable",
            },
            limit: error.limit().map(|kind| kind.as_str()),
            ms: elapsed.as_millis(),
        },
    };
    serde_json::to_string(&answer).unwrap_or_default()
}
