#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Quick end-to-end checks of the codec against Quirl's published fixtures.

use quirl_lua_protocol::records::*;
use quirl_lua_protocol::*;
use serde_json::json;
use std::collections::BTreeMap;

const REQUEST: &[u8] = br#"{"kind":"request","request":{"version":1,"id":7,"operation":{"operation":"eval","source":"return 42"}}}"#;
const RESPONSE: &[u8] =
    br#"{"kind":"response","response":{"version":1,"id":7,"ok":true,"result":42}}"#;

// SPEC §8.1-b, §12.1-a: typed records hold no version; the encoder writes `"version":1` and Quirl's
// bytes exactly.
#[test]
fn quirl_fixtures_round_trip_byte_for_byte() {
    let request = decode_parent_frame(REQUEST).unwrap();
    assert_eq!(encode_parent_frame(&request).unwrap(), REQUEST);
    let response = decode_worker_frame(RESPONSE).unwrap();
    assert_eq!(encode_worker_frame(&response).unwrap(), RESPONSE);
}

#[test]
fn every_operation_round_trips() {
    let context = ExecutionContext {
        arguments: vec!["a".into()],
        environment: [("HOME".to_owned(), "/root".to_owned())].into(),
        working_directory: "/tmp".into(),
        input: ExecutionInput::Value(StructuredValue::Record(vec![
            ("z".into(), StructuredValue::UInt(1)),
            (
                "a".into(),
                StructuredValue::List(vec![StructuredValue::Nothing]),
            ),
        ])),
        output: OutputTarget::Capture {
            max_bytes_per_stream: 1024,
        },
        declared_effects: ExecutionEffects::default(),
    };
    let operations = vec![
        Operation::initialize(Policy::quirl_script_profile(), None, true),
        Operation::initialize(
            Policy::quirl_config_profile(),
            Some(vec!["process.spawn:git".into()]),
            false,
        ),
        Operation::Eval {
            source: "return 1".into(),
        },
        Operation::Check {
            source: "x".into(),
            source_name: "x.lua".into(),
        },
        Operation::LoadConfig {
            source: "x".into(),
            source_name: "c.lua".into(),
        },
        Operation::LoadPlugin {
            source: "x".into(),
            source_name: "p.lua".into(),
        },
        Operation::RenderPrompt {
            name: "git".into(),
            context: json!({"b": 1, "a": [true, null]}),
        },
        Operation::Complete {
            command: "git".into(),
            context: json!({}),
        },
        Operation::Contribution {
            kind: ContributionKind::Panel,
            name: "p".into(),
            context: json!("x"),
        },
        Operation::Run {
            source: "x".into(),
            source_name: "r.lua".into(),
            context: context.clone(),
        },
        Operation::PluginCommand {
            name: "cmd".into(),
            context,
            deadline_ms: 5,
        },
        Operation::Event {
            event: ExtensionEvent {
                protocol_version: 2,
                sequence: 1,
                data: ExtensionEventData::Output {
                    stream: OutputStream::Stderr,
                    bytes: 3,
                    text: None,
                },
            },
        },
        Operation::Test {
            source: "x".into(),
            source_name: "t.lua".into(),
        },
    ];
    for (id, operation) in operations.into_iter().enumerate() {
        let frame = ParentFrame::Request {
            request: Request {
                id: id as u64 + 1,
                operation,
            },
        };
        let bytes = encode_parent_frame(&frame).unwrap();
        let decoded = decode_parent_frame(&bytes).unwrap();
        assert_eq!(decoded, frame);
        assert_eq!(encode_parent_frame(&decoded).unwrap(), bytes);
    }
}

// SPEC §6.14-a: the text payloads of a StructuredValue are carried byte for
// byte, whatever they say; SPEC §5.9: an empty `text` is a value, not absent.
#[test]
fn structured_text_payloads_and_an_empty_output_text_travel_unchanged() {
    let odd = ["1.50", "-3e2", "not a number, kept", "", "0x1p-2"];
    for text in odd {
        let input = StructuredValue::List(vec![
            StructuredValue::Decimal(text.to_owned()),
            StructuredValue::DateTime(text.to_owned()),
            StructuredValue::Pattern(text.to_owned()),
        ]);
        let frame = ParentFrame::Request {
            request: Request {
                id: 1,
                operation: Operation::Run {
                    source: "x".into(),
                    source_name: "r.lua".into(),
                    context: ExecutionContext {
                        arguments: vec![],
                        environment: BTreeMap::new(),
                        working_directory: "/".into(),
                        input: ExecutionInput::Value(input),
                        output: OutputTarget::Value,
                        declared_effects: ExecutionEffects::default(),
                    },
                },
            },
        };
        let bytes = encode_parent_frame(&frame).unwrap();
        let wire = format!(r#"{{"type":"decimal","value":{}}}"#, json!(text));
        assert!(String::from_utf8_lossy(&bytes).contains(&wire), "{text:?}");
        let decoded =
            decode_parent_frame(&bytes).unwrap_or_else(|error| panic!("{text:?}: {error}"));
        assert_eq!(decoded, frame, "{text:?}");
        assert_eq!(encode_parent_frame(&decoded).unwrap(), bytes);
    }
    let output = ParentFrame::Request {
        request: Request {
            id: 1,
            operation: Operation::Event {
                event: ExtensionEvent {
                    protocol_version: 2,
                    sequence: 1,
                    data: ExtensionEventData::Output {
                        stream: OutputStream::Stdout,
                        bytes: 0,
                        text: Some(String::new()),
                    },
                },
            },
        },
    };
    let bytes = encode_parent_frame(&output).unwrap();
    assert!(
        String::from_utf8_lossy(&bytes).contains(r#""text":"""#),
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    assert_eq!(decode_parent_frame(&bytes).unwrap(), output);
}

#[test]
fn rejects_with_precise_kinds() {
    let cases: &[(&[u8], ErrorKind)] = &[
        (br#"{"kind":"request","request":{"version":2,"id":1,"operation":{"operation":"eval","source":""}}}"#, ErrorKind::BadVersion),
        (br#"{"kind":"request","request":{"version":1,"id":1,"operation":{"operation":"eval","source":"","x":1}}}"#, ErrorKind::UnknownField),
        (br#"{"kind":"request","request":[1,2,3]}"#, ErrorKind::NotAnObject),
        (br#"{"kind":"request","kind":"request","request":{}}"#, ErrorKind::DuplicateKey),
        (br#"{"request":{"version":1,"id":1,"operation":{"operation":"eval","source":""}}}"#, ErrorKind::MissingTag),
        (br#"{"kind":"request","request":{"version":1,"id":-1,"operation":{"operation":"eval","source":""}}}"#, ErrorKind::IntegerOutOfRange),
        (br#"{"kind":"request","request":{"version":1,"id":1.0,"operation":{"operation":"eval","source":""}}}"#, ErrorKind::WrongType),
        (br#"{"kind":"request","request":{"version":1,"id":1,"operation":{"operation":"eval","source":""}}} "#, ErrorKind::TrailingBytes),
        (br#" {"kind":"request"}"#, ErrorKind::MalformedJson),
        (br#"{"kind":"nope"}"#, ErrorKind::UnknownVariant),
    ];
    for (bytes, kind) in cases {
        let error = decode_parent_frame(bytes).unwrap_err();
        assert_eq!(
            error.kind(),
            *kind,
            "{}: {error}",
            String::from_utf8_lossy(bytes)
        );
    }
}

// SPEC §5.8-a
#[test]
fn tag_may_come_last() {
    let bytes = br#"{"request":{"operation":{"source":"return 42","operation":"eval"},"id":7,"version":1},"kind":"request"}"#;
    let frame = decode_parent_frame(bytes).unwrap();
    assert_eq!(encode_parent_frame(&frame).unwrap(), REQUEST);
}

// SPEC §3.1-e
#[test]
fn decoder_handles_any_chunking() {
    let framed = [
        frame_payload(REQUEST).unwrap(),
        frame_payload(REQUEST).unwrap(),
    ]
    .concat();
    for chunk in 1..framed.len() {
        let mut decoder = FrameDecoder::new();
        let mut frames = Vec::new();
        for piece in framed.chunks(chunk) {
            let mut rest = piece;
            while !rest.is_empty() {
                match decoder.feed(rest).unwrap() {
                    Feed::NeedMore => rest = &[],
                    Feed::Frame { payload, consumed } => {
                        frames.push(payload);
                        rest = &rest[consumed..];
                    }
                    other => panic!("unknown feed outcome {other:?}"),
                }
            }
        }
        decoder.finish().unwrap();
        assert_eq!(frames, vec![REQUEST.to_vec(), REQUEST.to_vec()]);
    }
}
