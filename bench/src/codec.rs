//! X1: the protocol codec against bare serde_json into Quirl-shaped types.
//!
//! The mirror types below are serde-derived copies of the records Quirl 0.1
//! reads and writes (`deny_unknown_fields`, internally tagged enums, free-form
//! values as `serde_json::Value`): what `serde_json::from_slice`/`to_vec`
//! would do with no strictness beyond serde's own.

use std::hint::black_box;
use std::time::{Duration, Instant};

use quirl_lua_protocol::records::{
    HostCall, Operation, ParentFrame, Request, Response, WorkerFrame,
};
use quirl_lua_protocol::{
    decode_parent_frame, decode_worker_frame, encode_parent_frame, encode_worker_frame,
};
use serde_json::Value;

use crate::report::{Row, Summary, Unit, Value as Cell};
use quirl_lua_testkit::mirror::{MirrorParentFrame, MirrorWorkerFrame};

/// A frame under test, in both type systems.
enum Sample {
    Parent(ParentFrame, Vec<u8>),
    Worker(WorkerFrame, Vec<u8>),
}

/// A realistic 64 KiB Lua source: lines with quotes and newlines (escaped
/// in JSON), ASCII otherwise.
pub fn lua_source(bytes: usize) -> String {
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

/// The 1,000-entry result: completion-like objects with sorted keys.
pub fn thousand_entries() -> Value {
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

fn samples() -> Result<Vec<(&'static str, Sample)>, Box<dyn std::error::Error>> {
    let eval = |source: String| ParentFrame::Request {
        request: Request {
            id: 7,
            operation: Operation::Eval { source },
        },
    };
    let small = eval("return 1".to_owned());
    let large = eval(lua_source(64 * 1024));
    let response = WorkerFrame::Response {
        response: Response::success(7, thousand_entries()),
    };
    let call = WorkerFrame::HostCall {
        call: HostCall {
            request_id: 7,
            call_id: 1,
            command: "git status --porcelain".to_owned(),
            deadline_ms: 240,
            max_output_bytes: 1_048_576,
        },
    };
    Ok(vec![
        (
            "eval request (small)",
            Sample::Parent(small.clone(), encode_parent_frame(&small)?),
        ),
        (
            "eval request (64 KiB source)",
            Sample::Parent(large.clone(), encode_parent_frame(&large)?),
        ),
        (
            "response (1,000-entry result)",
            Sample::Worker(response.clone(), encode_worker_frame(&response)?),
        ),
        (
            "host call",
            Sample::Worker(call.clone(), encode_worker_frame(&call)?),
        ),
    ])
}

/// Time `f` in batches; returns per-call nanoseconds of each batch.
///
/// Two closures are measured interleaved (batch of `a`, batch of `b`, …)
/// so that drift in machine load hits both alike.
pub fn interleaved(
    budget: Duration,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (Vec<f64>, Vec<f64>) {
    // Calibrate: iterations per batch so that one batch takes ~1 ms.
    let per_call = |f: &mut dyn FnMut()| {
        let started = Instant::now();
        let mut n = 0_u32;
        while started.elapsed() < Duration::from_millis(20) {
            f();
            n += 1;
        }
        started.elapsed().as_nanos() as f64 / f64::from(n.max(1))
    };
    let cost = per_call(&mut a).max(per_call(&mut b)).max(1.0);
    let iterations = ((1_000_000.0 / cost) as u32).clamp(1, 1_000_000);
    let mut times_a = Vec::new();
    let mut times_b = Vec::new();
    let started = Instant::now();
    while started.elapsed() < budget || times_a.len() < 10 {
        for (f, times) in [
            (&mut a as &mut dyn FnMut(), &mut times_a),
            (&mut b as &mut dyn FnMut(), &mut times_b),
        ] {
            let batch = Instant::now();
            for _ in 0..iterations {
                f();
            }
            times.push(batch.elapsed().as_nanos() as f64 / f64::from(iterations));
        }
    }
    (times_a, times_b)
}

fn row(
    what: String,
    ours: &mut [f64],
    baseline_name: &str,
    baseline: &mut [f64],
    target: Option<f64>,
) -> Option<Row> {
    let ours = Summary::of_nanos(ours)?;
    let base = Summary::of_nanos(baseline)?;
    let ratio = ours.p50 / base.p50;
    Some(Row {
        id: "X1",
        what,
        unit: Unit::Time,
        ours: Cell::time(ours),
        baseline_name: baseline_name.to_owned(),
        baseline: Some(Cell::time(base)),
        target: target.map_or_else(String::new, |t| format!("<= {t:.2}x")),
        met: target.map(|t| ratio <= t),
    })
}

/// Decode and encode each sample frame, ours against the serde mirror.
pub fn run(budget: Duration) -> Result<Vec<Row>, Box<dyn std::error::Error>> {
    let mut rows = Vec::new();
    for (name, sample) in samples()? {
        let (mut dec_ours, mut dec_base, mut enc_ours, mut enc_base, mut enc_plain) = match &sample
        {
            Sample::Parent(frame, bytes) => {
                let mirror: MirrorParentFrame = serde_json::from_slice(bytes)?;
                if serde_json::to_vec(&mirror)? != *bytes {
                    return Err(format!("mirror encoding of {name} differs").into());
                }
                let (d_ours, d_base) = interleaved(
                    budget,
                    || {
                        let _ = black_box(decode_parent_frame(black_box(bytes)));
                    },
                    || {
                        let _ = black_box(serde_json::from_slice::<MirrorParentFrame>(black_box(
                            bytes,
                        )));
                    },
                );
                let (e_ours, e_base) = interleaved(
                    budget,
                    || {
                        let _ = black_box(encode_parent_frame(black_box(frame)));
                    },
                    || {
                        let _ = black_box(serde_json::to_vec(black_box(&mirror)));
                    },
                );
                let (e_plain, _) = interleaved(
                    budget / 2,
                    || {
                        let _ = black_box(serde_json::to_vec(black_box(frame)));
                    },
                    || {},
                );
                (d_ours, d_base, e_ours, e_base, e_plain)
            }
            Sample::Worker(frame, bytes) => {
                let mirror: MirrorWorkerFrame = serde_json::from_slice(bytes)?;
                if serde_json::to_vec(&mirror)? != *bytes {
                    return Err(format!("mirror encoding of {name} differs").into());
                }
                let (d_ours, d_base) = interleaved(
                    budget,
                    || {
                        let _ = black_box(decode_worker_frame(black_box(bytes)));
                    },
                    || {
                        let _ = black_box(serde_json::from_slice::<MirrorWorkerFrame>(black_box(
                            bytes,
                        )));
                    },
                );
                let (e_ours, e_base) = interleaved(
                    budget,
                    || {
                        let _ = black_box(encode_worker_frame(black_box(frame)));
                    },
                    || {
                        let _ = black_box(serde_json::to_vec(black_box(&mirror)));
                    },
                );
                let (e_plain, _) = interleaved(
                    budget / 2,
                    || {
                        let _ = black_box(serde_json::to_vec(black_box(frame)));
                    },
                    || {},
                );
                (d_ours, d_base, e_ours, e_base, e_plain)
            }
        };
        let size = match &sample {
            Sample::Parent(_, bytes) | Sample::Worker(_, bytes) => bytes.len(),
        };
        rows.extend(row(
            format!("decode+validate {name}, {size} B"),
            &mut dec_ours,
            "serde_json::from_slice",
            &mut dec_base,
            Some(1.15),
        ));
        rows.extend(row(
            format!("encode (checked) {name}"),
            &mut enc_ours,
            "serde_json::to_vec",
            &mut enc_base,
            None,
        ));
        rows.extend(row(
            format!("encode (serialize only) {name}"),
            &mut enc_plain,
            "serde_json::to_vec",
            &mut enc_base,
            None,
        ));
    }
    Ok(rows)
}
