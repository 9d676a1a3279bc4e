//! X2: a warm `eval "return 1"` round trip through the parent library,
//! against a raw pipe ping-pong of the same frame sizes (the echo child of
//! `quirl-lua-bench --internal-echo`), both unpinned; see `quirl-lua-bench`
//! for the pinned variant and the side-by-side table.
//!
//! ```sh
//! cargo bench -p quirl-lua-bench --bench round_trip
//! ```
//!
//! Under `cargo test --all-targets` criterion runs each benchmark once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use criterion::{Criterion, criterion_group, criterion_main};
use quirl_lua_protocol::WireFrame;
use quirl_lua_protocol::records::{
    Operation, ParentFrame, Policy, PolicySettings, Request, Response, WorkerFrame,
};
use quirl_lua_reference_parent::{WORKER_ARGUMENT, Worker, WorkerCommand, WorkerConfig};

fn round_trip(c: &mut Criterion) {
    let mut group = c.benchmark_group("round_trip");
    let policy = Policy::new(PolicySettings {
        allow_process: false,
        memory_limit_bytes: 32 << 20,
        instruction_limit: 100_000_000,
        wall_time_ms: 10_000,
    })
    .unwrap();
    let command = WorkerCommand::new(quirl_lua_testkit::bin_path("quirl-lua-cli", "quirl-lua"))
        .arg(WORKER_ARGUMENT);
    let mut worker = Worker::spawn(WorkerConfig::new(command, policy)).unwrap();
    group.bench_function("parent_eval_return_1", |b| {
        b.iter(|| worker.eval("return 1").unwrap())
    });
    worker.shutdown().unwrap();

    let id = 50_000;
    let request = ParentFrame::Request {
        request: Request {
            id,
            operation: Operation::Eval {
                source: "return 1".to_owned(),
            },
        },
    }
    .encode_framed()
    .unwrap();
    let response_len = WorkerFrame::Response {
        response: Response::success(id, 1.into()),
    }
    .encode_framed()
    .unwrap()
    .len();
    let mut child = Command::new(env!("CARGO_BIN_EXE_quirl-lua-bench"))
        .arg("--internal-echo")
        .arg(response_len.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut buffer = vec![0_u8; 64 * 1024];
    group.bench_function("pipe_ping_pong", |b| {
        b.iter(|| {
            stdin.write_all(&request).unwrap();
            let mut got = 0;
            while got < response_len {
                let n = stdout.read(&mut buffer[got..]).unwrap();
                assert!(n > 0, "echo child ended");
                got += n;
            }
        })
    });
    drop(stdin);
    child.wait().unwrap();
    group.finish();
}

criterion_group!(benches, round_trip);
criterion_main!(benches);
