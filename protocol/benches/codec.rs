//! X1: strict decode+validate and checked encode of representative frames,
//! against bare `serde_json` into Quirl-shaped serde types
//! (`quirl_lua_testkit::mirror`).
//!
//! ```sh
//! cargo bench -p quirl-lua-protocol --bench codec
//! ```
//!
//! Under `cargo test --all-targets` criterion runs each benchmark once.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(missing_docs)] // criterion_group! generates an undocumented pub fn

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use quirl_lua_protocol::records::{
    HostCall, Operation, ParentFrame, Request, Response, WorkerFrame,
};
use quirl_lua_protocol::{
    decode_parent_frame, decode_worker_frame, encode_parent_frame, encode_worker_frame,
};
use quirl_lua_testkit::mirror::{MirrorParentFrame, MirrorWorkerFrame};
use serde_json::Value;

fn lua_source(bytes: usize) -> String {
    let mut source = String::with_capacity(bytes + 64);
    let mut line = 0_u32;
    while source.len() < bytes {
        source.push_str(&format!(
            "local v{line} = {{ name = \"item {line}\", weight = {} }} -- entry {line}\n",
            line % 97
        ));
        line += 1;
    }
    source.truncate(bytes);
    source
}

fn thousand_entries() -> Value {
    Value::Array(
        (0..1000)
            .map(|i| {
                serde_json::json!({
                    "display": format!("Candidate {i}"),
                    "value": format!("candidate-{i:04}"),
                })
            })
            .collect(),
    )
}

fn eval(source: String) -> ParentFrame {
    ParentFrame::Request {
        request: Request {
            id: 7,
            operation: Operation::Eval { source },
        },
    }
}

fn parent_frames() -> Vec<(&'static str, ParentFrame)> {
    vec![
        ("eval_small", eval("return 1".to_owned())),
        ("eval_64k", eval(lua_source(64 * 1024))),
    ]
}

fn worker_frames() -> Vec<(&'static str, WorkerFrame)> {
    vec![
        (
            "response_1000",
            WorkerFrame::Response {
                response: Response::success(7, thousand_entries()),
            },
        ),
        (
            "host_call",
            WorkerFrame::HostCall {
                call: HostCall {
                    request_id: 7,
                    call_id: 1,
                    command: "git status --porcelain".to_owned(),
                    deadline_ms: 240,
                    max_output_bytes: 1_048_576,
                },
            },
        ),
    ]
}

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode");
    for (name, frame) in parent_frames() {
        let bytes = encode_parent_frame(&frame).unwrap();
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(BenchmarkId::new("protocol", name), &bytes, |b, bytes| {
            b.iter(|| decode_parent_frame(black_box(bytes)).unwrap());
        });
        group.bench_with_input(BenchmarkId::new("serde_json", name), &bytes, |b, bytes| {
            b.iter(|| serde_json::from_slice::<MirrorParentFrame>(black_box(bytes)).unwrap());
        });
    }
    for (name, frame) in worker_frames() {
        let bytes = encode_worker_frame(&frame).unwrap();
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(BenchmarkId::new("protocol", name), &bytes, |b, bytes| {
            b.iter(|| decode_worker_frame(black_box(bytes)).unwrap());
        });
        group.bench_with_input(BenchmarkId::new("serde_json", name), &bytes, |b, bytes| {
            b.iter(|| serde_json::from_slice::<MirrorWorkerFrame>(black_box(bytes)).unwrap());
        });
    }
    group.finish();
}

fn encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("encode");
    for (name, frame) in parent_frames() {
        let bytes = encode_parent_frame(&frame).unwrap();
        let mirror: MirrorParentFrame = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(serde_json::to_vec(&mirror).unwrap(), bytes);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function(BenchmarkId::new("protocol_checked", name), |b| {
            b.iter(|| encode_parent_frame(black_box(&frame)).unwrap());
        });
        group.bench_function(BenchmarkId::new("serde_json", name), |b| {
            b.iter(|| serde_json::to_vec(black_box(&mirror)).unwrap());
        });
    }
    for (name, frame) in worker_frames() {
        let bytes = encode_worker_frame(&frame).unwrap();
        let mirror: MirrorWorkerFrame = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(serde_json::to_vec(&mirror).unwrap(), bytes);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function(BenchmarkId::new("protocol_checked", name), |b| {
            b.iter(|| encode_worker_frame(black_box(&frame)).unwrap());
        });
        group.bench_function(BenchmarkId::new("serde_json", name), |b| {
            b.iter(|| serde_json::to_vec(black_box(&mirror)).unwrap());
        });
    }
    group.finish();
}

criterion_group!(benches, decode, encode);
criterion_main!(benches);
