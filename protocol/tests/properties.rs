#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Property tests: canonical round trips, chunking independence, no panics.

use proptest::prelude::*;
use quirl_lua_protocol::records::*;
use quirl_lua_protocol::*;
use serde_json::Value;

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".*".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..8)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

fn operation() -> impl Strategy<Value = Operation> {
    prop_oneof![
        ".*".prop_map(|source| Operation::Eval { source }),
        (".*", ".*").prop_map(|(source, source_name)| Operation::Check {
            source,
            source_name
        }),
        (".*", json_value())
            .prop_map(|(command, context)| Operation::Complete { command, context }),
        (".*", json_value()).prop_map(|(name, context)| Operation::RenderPrompt { name, context }),
        (
            any::<bool>(),
            1..=64_u64 * 1024 * 1024,
            1..=100_000_000_u64,
            1..=60_000_u64,
            prop::option::of(prop::collection::vec(".*", 0..4)),
            any::<bool>()
        )
            .prop_map(|(allow, memory, instructions, wall, grants, process)| {
                Operation::initialize(
                    Policy::new(PolicySettings {
                        allow_process: allow,
                        memory_limit_bytes: memory,
                        instruction_limit: instructions,
                        wall_time_ms: wall,
                    })
                    .unwrap(),
                    grants,
                    process,
                )
            }),
    ]
}

fn parent_frame() -> impl Strategy<Value = ParentFrame> {
    (any::<u64>(), operation()).prop_map(|(id, operation)| ParentFrame::Request {
        request: Request { id, operation },
    })
}

fn worker_frame() -> impl Strategy<Value = WorkerFrame> {
    prop_oneof![
        (any::<u64>(), json_value()).prop_map(|(id, result)| WorkerFrame::Response {
            response: Response::success(id, result)
        }),
        (any::<u64>(), ".*", prop::collection::vec(".*", 0..4)).prop_map(
            |(id, message, context)| {
                let mut error = ShellError::new(ErrorCode::Lua, message);
                error.context = context;
                WorkerFrame::Response {
                    response: Response::failure(id, error),
                }
            }
        ),
        (
            any::<u64>(),
            1..=16_u32,
            ".*",
            any::<u64>(),
            0..=1024 * 1024_u64
        )
            .prop_map(
                |(request_id, call_id, command, deadline_ms, max_output_bytes)| {
                    WorkerFrame::HostCall {
                        call: HostCall {
                            request_id,
                            call_id,
                            command,
                            deadline_ms,
                            max_output_bytes,
                        },
                    }
                }
            ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parent_frames_round_trip_canonically(frame in parent_frame()) {
        let bytes = encode_parent_frame(&frame).unwrap();
        let decoded = decode_parent_frame(&bytes).unwrap();
        prop_assert_eq!(encode_parent_frame(&decoded).unwrap(), bytes);
    }

    #[test]
    fn worker_frames_round_trip_canonically(frame in worker_frame()) {
        let bytes = encode_worker_frame(&frame).unwrap();
        let decoded = decode_worker_frame(&bytes).unwrap();
        prop_assert_eq!(&decoded, &frame);
        prop_assert_eq!(encode_worker_frame(&decoded).unwrap(), bytes);
    }

    #[test]
    fn free_form_values_read_like_serde_json(value in json_value()) {
        let text = serde_json::to_string(&value).unwrap();
        let frame = format!(r#"{{"kind":"response","response":{{"version":1,"id":1,"ok":true,"result":{text}}}}}"#);
        let WorkerFrame::Response { response } = decode_worker_frame(frame.as_bytes()).unwrap() else {
            panic!("a response");
        };
        prop_assert_eq!(response.result.unwrap(), value);
    }

    #[test]
    fn decoding_is_independent_of_chunking(
        frames in prop::collection::vec(parent_frame(), 1..4),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let payloads: Vec<Vec<u8>> = frames.iter().map(|f| encode_parent_frame(f).unwrap()).collect();
        let stream: Vec<u8> = payloads.iter().flat_map(|p| frame_payload(p).unwrap()).collect();
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        points.push(0);
        points.push(stream.len());
        points.sort_unstable();
        let mut decoder = FrameDecoder::new();
        let mut got = Vec::new();
        for window in points.windows(2) {
            let mut rest = &stream[window[0]..window[1]];
            while !rest.is_empty() {
                match decoder.feed(rest).unwrap() {
                    Feed::NeedMore => rest = &[],
                    Feed::Frame { payload, consumed } => {
                        got.push(payload);
                        rest = &rest[consumed..];
                    }
                    other => panic!("unknown feed outcome {other:?}"),
                }
            }
        }
        decoder.finish().unwrap();
        prop_assert_eq!(got, payloads);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_parent_frame(&bytes);
        let _ = decode_worker_frame(&bytes);
        let mut decoder = FrameDecoder::with_max_payload(64);
        let mut rest = &bytes[..];
        while let Ok(Feed::Frame { payload, consumed }) = decoder.feed(rest) {
            let _ = decode_parent_frame(&payload);
            rest = &rest[consumed..];
        }
        let _ = decoder.finish();
    }

    #[test]
    fn mutated_frames_never_panic_and_never_decode_to_different_canonical_bytes(
        frame in parent_frame(), at in any::<prop::sample::Index>(), byte in any::<u8>()
    ) {
        let mut bytes = encode_parent_frame(&frame).unwrap();
        let index = at.index(bytes.len());
        bytes[index] = byte;
        if let Ok(decoded) = decode_parent_frame(&bytes) {
            // Whatever decodes must re-encode to something that decodes to the same frame.
            let again = encode_parent_frame(&decoded).unwrap();
            prop_assert_eq!(decode_parent_frame(&again).unwrap(), decoded);
        }
    }
}
