#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The encoders check typed records instead of re-decoding what they wrote
//! (codec.rs). These tests hold the typed check to the reference: for valid
//! and invalid records alike, the encoder must accept exactly the frames that
//! encoding-then-decoding accepts (the reference is written here: serialize
//! with serde, refuse an empty or oversized payload, decode strictly), with
//! the same bytes and the same error kind, and whatever it accepts must
//! decode back to the same frame.

use proptest::prelude::*;
use quirl_lua_protocol::limits::{
    ERROR_ITEMS_MAX, ERROR_TEXT_BYTES_MAX, HOST_COMMAND_BYTES_MAX, HOST_OUTPUT_BYTES_MAX,
    JSON_DEPTH_MAX, SOURCE_BYTES_MAX,
};
use quirl_lua_protocol::records::*;
use quirl_lua_protocol::*;
use quirl_lua_testkit::generate::{self, Source};
use serde_json::Value;

/// Free-form values nested up to this deep are checked on the typed
/// record by the encoder, deeper ones by re-decoding (`codec.rs`,
/// `TYPED_VALUE_DEPTH_MAX`, private): the depths around it are tried.
const TYPED_VALUE_DEPTH_MAX: usize = 64;

/// The reference encoder: serde's bytes, the frame size rules of SPEC
/// §4.2, then the strict decoder of the direction, exactly as a receiver.
fn encode_by_redecoding<F: serde::Serialize>(
    frame: &F,
    decode: impl Fn(&[u8]) -> Result<F, ProtocolError>,
) -> Result<Vec<u8>, ProtocolError> {
    let payload = serde_json::to_vec(frame).unwrap();
    // `frame_payload` refuses an empty or oversized payload (SPEC §4.2).
    frame_payload(&payload)?;
    decode(&payload)?;
    Ok(payload)
}

fn encode_parent_frame_by_redecoding(frame: &ParentFrame) -> Result<Vec<u8>, ProtocolError> {
    encode_by_redecoding(frame, decode_parent_frame)
}

fn encode_worker_frame_by_redecoding(frame: &WorkerFrame) -> Result<Vec<u8>, ProtocolError> {
    encode_by_redecoding(frame, decode_worker_frame)
}

fn nested(depth: usize) -> Value {
    let mut value = Value::from(1);
    for level in 0..depth {
        value = if level % 2 == 0 {
            Value::Array(vec![value])
        } else {
            let mut map = serde_json::Map::new();
            map.insert("k".into(), value);
            Value::Object(map)
        };
    }
    value
}

/// Break an error record in one of the ways its bounds forbid (or not at all).
fn corrupt_error(src: &mut Source<'_>, error: &mut ShellError) {
    match src.below(6) {
        0 => error.context = vec![String::new(); ERROR_ITEMS_MAX + 1],
        1 => error.help = vec!["x".into(); ERROR_ITEMS_MAX + src.below(2)],
        2 => error.message = "m".repeat(ERROR_TEXT_BYTES_MAX + 1 - src.below(2)),
        3 => error.labels.push(ErrorLabel {
            source: None,
            start: 5,
            end: 4,
            message: String::new(),
        }),
        4 => error.labels.push(ErrorLabel {
            source: Some("é".into()),
            start: 1,
            end: 2,
            message: String::new(),
        }),
        _ => {}
    }
}

fn corrupt_value(src: &mut Source<'_>) -> Value {
    // Around the typed-check cut-off and around the JSON depth limit.
    let depths = [
        0,
        TYPED_VALUE_DEPTH_MAX - 1,
        TYPED_VALUE_DEPTH_MAX,
        TYPED_VALUE_DEPTH_MAX + 1,
        JSON_DEPTH_MAX - 4,
        JSON_DEPTH_MAX - 3,
        JSON_DEPTH_MAX - 2,
        JSON_DEPTH_MAX - 1,
        JSON_DEPTH_MAX,
        JSON_DEPTH_MAX + 1,
    ];
    nested(depths[src.below(depths.len())])
}

fn corrupt_parent(src: &mut Source<'_>, frame: &mut ParentFrame) {
    if !src.flag() {
        return;
    }
    match frame {
        ParentFrame::Request { request } => match &mut request.operation {
            Operation::Initialize {
                protocol_descriptor,
                ..
            } => {
                if src.flag() {
                    protocol_descriptor.push(' ');
                }
            }
            Operation::Eval { source }
            | Operation::Check { source, .. }
            | Operation::LoadConfig { source, .. }
            | Operation::LoadPlugin { source, .. }
            | Operation::Run { source, .. }
            | Operation::Test { source, .. } => {
                if src.below(8) == 0 {
                    *source = "-".repeat(SOURCE_BYTES_MAX + 1 - src.below(2));
                }
            }
            Operation::RenderPrompt { context, .. }
            | Operation::Complete { context, .. }
            | Operation::Contribution { context, .. } => *context = corrupt_value(src),
            Operation::PluginCommand { deadline_ms, .. } => *deadline_ms = src.u64_in(0, 1),
            Operation::Event { .. } => {}
        },
        ParentFrame::HostResponse { response } => {
            match src.below(3) {
                0 => response.call_id = [0, 1, 16, 17, u32::MAX][src.below(5)],
                1 => {}
                _ => {}
            }
            match &mut response.result {
                Ok(outcome) => {
                    if src.flag() {
                        outcome.stdout = Some("o".repeat(
                            usize::try_from(HOST_OUTPUT_BYTES_MAX).unwrap() + 1 - src.below(2),
                        ));
                    }
                }
                Err(error) => corrupt_error(src, error),
            }
        }
    }
}

fn corrupt_worker(src: &mut Source<'_>, frame: &mut WorkerFrame) {
    if !src.flag() {
        return;
    }
    match frame {
        WorkerFrame::Response { response } => match &mut response.result {
            Ok(value) => *value = corrupt_value(src),
            Err(error) => corrupt_error(src, error),
        },
        WorkerFrame::HostCall { call } => match src.below(3) {
            0 => call.call_id = [0, 1, 16, 17, u32::MAX][src.below(5)],
            1 => call.command = "c".repeat(HOST_COMMAND_BYTES_MAX + 1 - src.below(2)),
            _ => call.max_output_bytes = HOST_OUTPUT_BYTES_MAX + 1 - src.u64_in(0, 1),
        },
    }
}

fn agree<F: WireFrame + PartialEq + std::fmt::Debug>(
    frame: &F,
    typed: Result<Vec<u8>, ProtocolError>,
    reference: Result<Vec<u8>, ProtocolError>,
) {
    match (typed, reference) {
        (Ok(typed), Ok(reference)) => {
            assert_eq!(typed, reference, "same canonical bytes");
            assert_eq!(&F::decode(&typed).unwrap(), frame, "encode then decode");
            let framed = frame.encode_framed().unwrap();
            assert_eq!(&framed[4..], &typed[..]);
            assert_eq!(
                framed[..4],
                u32::try_from(typed.len()).unwrap().to_be_bytes()
            );
        }
        (Err(typed), Err(reference)) => {
            assert_eq!(typed.kind(), reference.kind(), "{typed} / {reference}");
            assert_eq!(frame.encode_framed().unwrap_err().kind(), typed.kind());
        }
        (typed, reference) => panic!(
            "typed check and re-decoding disagree on {frame:?}: {:?} / {:?}",
            typed.map(|_| "accepted"),
            reference.map(|_| "accepted")
        ),
    }
}

fn check(data: &[u8]) {
    let mut src = Source::new(data);
    let mut frame = generate::parent_frame(&mut src);
    corrupt_parent(&mut src, &mut frame);
    agree(
        &frame,
        encode_parent_frame(&frame),
        encode_parent_frame_by_redecoding(&frame),
    );
    let mut frame = generate::worker_frame(&mut src);
    corrupt_worker(&mut src, &mut frame);
    agree(
        &frame,
        encode_worker_frame(&frame),
        encode_worker_frame_by_redecoding(&frame),
    );
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Valid and broken records: the typed check and re-decoding agree.
    #[test]
    fn typed_check_agrees_with_redecoding(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        check(&data);
    }
}

fn refused_parent(frame: ParentFrame, kind: ErrorKind) {
    assert_eq!(encode_parent_frame(&frame).unwrap_err().kind(), kind);
    assert_eq!(frame.encode_framed().unwrap_err().kind(), kind);
    assert_eq!(
        encode_parent_frame_by_redecoding(&frame)
            .unwrap_err()
            .kind(),
        kind
    );
}

fn refused_worker(frame: WorkerFrame, kind: ErrorKind) {
    assert_eq!(encode_worker_frame(&frame).unwrap_err().kind(), kind);
    assert_eq!(frame.encode_framed().unwrap_err().kind(), kind);
    assert_eq!(
        encode_worker_frame_by_redecoding(&frame)
            .unwrap_err()
            .kind(),
        kind
    );
}

#[test]
fn invalid_typed_records_are_still_refused() {
    // A policy out of range cannot be built through any public constructor.
    assert_eq!(
        Policy::new(PolicySettings {
            allow_process: false,
            memory_limit_bytes: 0,
            instruction_limit: 1,
            wall_time_ms: 1
        })
        .unwrap_err()
        .kind(),
        ErrorKind::PolicyOutOfRange
    );
    assert_eq!(
        Policy::new(PolicySettings {
            allow_process: false,
            memory_limit_bytes: 1,
            instruction_limit: 1,
            wall_time_ms: 60_001
        })
        .unwrap_err()
        .kind(),
        ErrorKind::PolicyOutOfRange
    );
    let request = |operation| ParentFrame::Request {
        request: Request { id: 1, operation },
    };
    refused_parent(
        request(Operation::Initialize {
            protocol_descriptor: "quirl.lua-worker@2".into(),
            policy: Policy::quirl_script_profile(),
            grants: None,
            process_enabled: false,
        }),
        ErrorKind::DescriptorMismatch,
    );
    refused_parent(
        request(Operation::Eval {
            source: " ".repeat(SOURCE_BYTES_MAX + 1),
        }),
        ErrorKind::DomainBounds,
    );
    refused_parent(
        request(Operation::Complete {
            command: "git".into(),
            context: nested(JSON_DEPTH_MAX),
        }),
        ErrorKind::DepthExceeded,
    );
    let mut error = ShellError::new(ErrorCode::Lua, "boom");
    error.context = vec![String::new(); ERROR_ITEMS_MAX + 1];
    refused_worker(
        WorkerFrame::Response {
            response: Response::failure(1, error.clone()),
        },
        ErrorKind::ErrorRecordBounds,
    );
    refused_parent(
        ParentFrame::HostResponse {
            response: HostResponse {
                request_id: 1,
                call_id: 1,
                result: Err(error),
            },
        },
        ErrorKind::ErrorRecordBounds,
    );
    refused_worker(
        WorkerFrame::Response {
            response: Response::success(1, nested(JSON_DEPTH_MAX - 1)),
        },
        ErrorKind::DepthExceeded,
    );
    let call = HostCall {
        request_id: 1,
        call_id: 17,
        command: "true".into(),
        deadline_ms: 10,
        max_output_bytes: 0,
    };
    refused_worker(
        WorkerFrame::HostCall { call: call.clone() },
        ErrorKind::HostCallLimit,
    );
    refused_parent(
        ParentFrame::HostResponse {
            response: HostResponse {
                request_id: 1,
                call_id: 0,
                result: Ok(CommandOutcome {
                    status: 0,
                    stdout: None,
                    stderr: None,
                }),
            },
        },
        ErrorKind::DomainBounds,
    );
    refused_worker(
        WorkerFrame::HostCall {
            call: HostCall {
                call_id: 1,
                max_output_bytes: HOST_OUTPUT_BYTES_MAX + 1,
                ..call
            },
        },
        ErrorKind::DomainBounds,
    );
}

#[test]
fn values_at_the_depth_limit_are_accepted() {
    // The deepest result the receiver accepts is still sent (the typed check
    // defers to re-decoding past its own cut-off).
    let response = WorkerFrame::Response {
        response: Response::success(1, nested(JSON_DEPTH_MAX - 2)),
    };
    let payload = encode_worker_frame(&response).unwrap();
    assert_eq!(decode_worker_frame(&payload).unwrap(), response);
}
