//! The contract of `examples/worker.rs` (its module docs), driven in
//! process over in-memory streams: answers, error responses and exit
//! statuses (SPEC §3.3, §9.6).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "../examples/worker.rs"]
mod example;

use quirl_lua_protocol::connection::FrameInbox;
use quirl_lua_protocol::records::*;
use quirl_lua_protocol::*;
use serde_json::json;
use std::process::ExitCode;

/// The framed requests a parent sends, ids 1, 2, ….
fn requests(operations: Vec<Operation>) -> Vec<u8> {
    let mut bytes = Vec::new();
    for (index, operation) in operations.into_iter().enumerate() {
        let request = Request {
            id: index as u64 + 1,
            operation,
        };
        bytes.extend(ParentFrame::Request { request }.encode_framed().unwrap());
    }
    bytes
}

/// Run the example worker on `input`; its exit status and responses.
fn run(input: &[u8]) -> (ExitCode, Vec<Response>) {
    let mut output = Vec::new();
    let status = example::serve(input, &mut output);
    let mut inbox = FrameInbox::new();
    inbox.feed(&output).unwrap();
    let mut responses = Vec::new();
    while let Some(payload) = inbox.next_payload().unwrap() {
        match decode_worker_frame(&payload).unwrap() {
            WorkerFrame::Response { response } => responses.push(response),
            other => panic!("the example worker sent {other:?}"),
        }
    }
    inbox.finish().unwrap();
    (status, responses)
}

fn eval(source: &str) -> Operation {
    Operation::Eval {
        source: source.to_owned(),
    }
}

#[test]
fn answers_initialize_and_integer_evals_and_refuses_the_rest() {
    let input = requests(vec![
        Operation::initialize(Policy::quirl_config_profile(), None, false),
        eval("return 42"),
        eval("return -7"),
        eval("return 6 * 7"),
        Operation::Check {
            source: "x".into(),
            source_name: "x.lua".into(),
        },
    ]);
    let (status, responses) = run(&input);
    assert_eq!(status, ExitCode::SUCCESS, "a clean end of input exits 0");
    let results: Vec<_> = responses.into_iter().map(|r| (r.id, r.result)).collect();
    assert_eq!(results[0], (1, Ok(serde_json::Value::Null)));
    assert_eq!(results[1], (2, Ok(json!(42))));
    assert_eq!(results[2], (3, Ok(json!(-7))));
    for (id, result) in &results[3..] {
        let record = result.as_ref().unwrap_err();
        assert_eq!(record.code, ErrorCode::InvalidCommand, "request {id}");
        assert!(record.message.contains("not supported by this worker"));
    }
    assert_eq!(results.len(), 5);
}

#[test]
fn a_violation_exits_nonzero_without_writing() {
    // A request before initialize.
    let (status, responses) = run(&requests(vec![eval("return 1")]));
    assert_eq!(status, ExitCode::FAILURE);
    assert!(responses.is_empty());
    // A stream cut inside a frame after a served initialize.
    let mut input = requests(vec![
        Operation::initialize(Policy::quirl_config_profile(), None, false),
        eval("return 1"),
    ]);
    input.truncate(input.len() - 3);
    let (status, responses) = run(&input);
    assert_eq!(status, ExitCode::FAILURE);
    assert_eq!(responses.len(), 1);
}
