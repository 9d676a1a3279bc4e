#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The classic decoder pitfalls, one test each: framing (SPEC §4), strict
//! JSON (§5), versions and descriptor (§8), policy ranges (§10).

mod common;

use common::*;
use quirl_lua_protocol::limits::*;
use quirl_lua_protocol::records::*;
use quirl_lua_protocol::*;
use serde_json::{Value, json};

const EVAL: &[u8] = br#"{"kind":"request","request":{"version":1,"id":7,"operation":{"operation":"eval","source":"return 42"}}}"#;

fn parent_kind(payload: &[u8]) -> ErrorKind {
    decode_parent_frame(payload).unwrap_err().kind()
}

fn worker_kind(payload: &[u8]) -> ErrorKind {
    decode_worker_frame(payload).unwrap_err().kind()
}

/// The eval request with `id` replaced by the literal `id`.
fn eval_with_id(id: &str) -> Vec<u8> {
    format!(r#"{{"kind":"request","request":{{"version":1,"id":{id},"operation":{{"operation":"eval","source":"x"}}}}}}"#).into_bytes()
}

fn header(length: u32) -> [u8; 4] {
    length.to_be_bytes()
}

// ----- framing ----------------------------------------------------------------

// SPEC §4.1-a, §4.3-b: a length of 0 is refused from the header alone.
#[test]
fn length_zero_is_an_empty_frame() {
    let mut decoder = FrameDecoder::new();
    assert_eq!(
        decoder.feed(&header(0)).unwrap_err().kind(),
        ErrorKind::EmptyFrame
    );
}

// SPEC §4.1-a, §4.3-b: the length range, checked from the four header bytes before anything is
// reserved.
#[test]
fn length_cap_minus_one_and_cap_are_accepted_cap_plus_one_is_oversized() {
    for length in [FRAME_BYTES_MAX - 1, FRAME_BYTES_MAX] {
        let mut decoder = FrameDecoder::new();
        assert_eq!(
            decoder.feed(&header(length as u32)).unwrap(),
            Feed::NeedMore
        );
        assert!(
            decoder.buffer_capacity() == 0,
            "nothing reserved for a bare header"
        );
    }
    let mut decoder = FrameDecoder::new();
    let error = decoder
        .feed(&header(FRAME_BYTES_MAX as u32 + 1))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::OversizedFrame);
    assert_eq!(error.code(), ErrorCode::ResourceLimit);
    let mut decoder = FrameDecoder::new();
    assert_eq!(
        decoder.feed(&header(u32::MAX)).unwrap_err().kind(),
        ErrorKind::OversizedFrame
    );
}

// SPEC §4.1-a, §4.2-a: the largest frame decodes; the encoder refuses one byte more.
#[test]
fn a_frame_of_exactly_the_cap_decodes_and_one_byte_more_cannot_be_encoded() {
    let frame = |name_len: usize| ParentFrame::Request {
        request: Request {
            id: 1,
            operation: Operation::Check {
                source: "x".repeat(SOURCE_BYTES_MAX),
                source_name: "n".repeat(name_len),
            },
        },
    };
    let base = encode_parent_frame(&frame(0)).unwrap().len();
    let exact = frame(FRAME_BYTES_MAX - base);
    let payload = encode_parent_frame(&exact).unwrap();
    assert_eq!(payload.len(), FRAME_BYTES_MAX);
    let framed = frame_payload(&payload).unwrap();
    let mut decoder = FrameDecoder::new();
    let Feed::Frame { payload: got, .. } = decoder.feed(&framed).unwrap() else {
        panic!()
    };
    assert_eq!(decode_parent_frame(&got).unwrap(), exact);
    let error = encode_parent_frame(&frame(FRAME_BYTES_MAX - base + 1)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::OversizedFrame);
}

// SPEC §4.3-c, §4.3-d: a declared 5 MiB with 10 bytes received reserves at most 64 KiB.
#[test]
fn huge_header_then_stall_reserves_only_received_bytes_and_reports_truncation() {
    let mut decoder = FrameDecoder::new();
    assert_eq!(
        decoder.feed(&header(FRAME_BYTES_MAX as u32)).unwrap(),
        Feed::NeedMore
    );
    assert_eq!(decoder.feed(b"0123456789").unwrap(), Feed::NeedMore);
    assert!(
        decoder.buffer_capacity() <= 64 * 1024,
        "{}",
        decoder.buffer_capacity()
    );
    assert_eq!(
        decoder.finish().unwrap_err().kind(),
        ErrorKind::TruncatedFrame
    );
}

#[test]
fn truncation_at_every_byte_is_reported_precisely() {
    let framed = frame_payload(EVAL).unwrap();
    for cut in 0..framed.len() {
        let mut decoder = FrameDecoder::new();
        let _ = decoder.feed(&framed[..cut]).unwrap();
        let result = decoder.finish();
        match cut {
            0 => assert!(result.is_ok(), "EOF at a frame boundary is clean"),
            1..=3 => assert_eq!(result.unwrap_err().kind(), ErrorKind::TruncatedHeader),
            _ => assert_eq!(result.unwrap_err().kind(), ErrorKind::TruncatedFrame),
        }
        // The truncated payload itself never decodes.
        if cut > 4 {
            assert!(decode_parent_frame(&framed[4..cut]).is_err());
        }
    }
}

// SPEC §3.1-e, §4.3-f: any chunking; the last frame is delivered when its last byte arrives,
// nothing more is awaited.
#[test]
fn two_frames_in_one_read_and_one_frame_split_across_many() {
    let framed = [frame_payload(EVAL).unwrap(), frame_payload(EVAL).unwrap()].concat();
    for chunk in 1..=framed.len() {
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
        assert_eq!(frames, vec![EVAL.to_vec(), EVAL.to_vec()], "chunk {chunk}");
    }
}

#[test]
fn decoder_errors_are_sticky() {
    let mut decoder = FrameDecoder::new();
    let first = decoder.feed(&header(0)).unwrap_err();
    assert_eq!(
        decoder.feed(&frame_payload(EVAL).unwrap()).unwrap_err(),
        first
    );
    assert_eq!(decoder.finish().unwrap_err(), first);
}

#[test]
fn blocking_reader_reads_frames_then_clean_eof_and_reports_truncation() {
    let stream = [frame_payload(EVAL).unwrap(), frame_payload(EVAL).unwrap()].concat();
    let mut reader = std::io::Cursor::new(stream.clone());
    for _ in 0..2 {
        let frame: ParentFrame = read_frame(&mut reader).unwrap().unwrap();
        assert!(matches!(frame, ParentFrame::Request { .. }));
    }
    assert!(read_frame::<ParentFrame, _>(&mut reader).unwrap().is_none());
    let mut cut = std::io::Cursor::new(stream[..stream.len() - 1].to_vec());
    read_payload(&mut cut).unwrap().unwrap();
    assert_eq!(
        read_payload(&mut cut).unwrap_err().kind(),
        ErrorKind::TruncatedFrame
    );
    let mut cut = std::io::Cursor::new(vec![0, 0]);
    assert_eq!(
        read_payload(&mut cut).unwrap_err().kind(),
        ErrorKind::TruncatedHeader
    );
}

// SPEC §4.2-b, §12.1-a: the length prefix and the canonical payload, back to back, nothing else.
#[test]
fn blocking_writer_writes_exactly_the_framed_canonical_bytes() {
    let frame = decode_parent_frame(EVAL).unwrap();
    let mut out = Vec::new();
    write_frame(&mut out, &frame).unwrap();
    assert_eq!(out, frame_payload(EVAL).unwrap());
}

// ----- strict JSON --------------------------------------------------------------

// SPEC §5.2-a: nothing after the value.
#[test]
fn trailing_whitespace_or_bytes_are_rejected() {
    for tail in [&b" "[..], b"\n", b"\t", b"\r", b"x", b"{}", b"\0"] {
        let payload = [EVAL, tail].concat();
        assert_eq!(parent_kind(&payload), ErrorKind::TrailingBytes, "{tail:?}");
    }
}

// SPEC §5.2-a: nothing before the value.
#[test]
fn leading_whitespace_is_rejected() {
    for head in [&b" "[..], b"\n", b"\t", b"\r"] {
        assert_eq!(
            parent_kind(&[head, EVAL].concat()),
            ErrorKind::MalformedJson
        );
    }
}

// SPEC §5.1-b
#[test]
fn byte_order_mark_is_rejected() {
    assert_eq!(
        parent_kind(&[&[0xEF, 0xBB, 0xBF][..], EVAL].concat()),
        ErrorKind::ByteOrderMark
    );
}

// SPEC §5.1-d
#[test]
fn nul_and_raw_control_characters_are_rejected() {
    assert_eq!(parent_kind(b"\0"), ErrorKind::MalformedJson);
    for control in (0_u8..0x20).map(char::from) {
        let text = format!(
            r#"{{"kind":"request","request":{{"version":1,"id":1,"operation":{{"operation":"eval","source":"a{control}b"}}}}}}"#
        );
        assert_eq!(
            parent_kind(text.as_bytes()),
            ErrorKind::MalformedJson,
            "{:?}",
            control
        );
    }
    // Escaped, the same characters are fine.
    let escaped = br#"{"kind":"request","request":{"version":1,"id":1,"operation":{"operation":"eval","source":"a\u0000\n\u001fb"}}}"#;
    assert!(decode_parent_frame(escaped).is_ok());
}

// SPEC §5.1-a, §5.1-c
#[test]
fn invalid_utf8_and_lone_surrogates_are_rejected() {
    let mut bad = EVAL.to_vec();
    let at = bad.len() - 8;
    bad[at] = 0xFF;
    assert_eq!(parent_kind(&bad), ErrorKind::InvalidUtf8);
    assert_eq!(
        parent_kind(&[EVAL, &[0xC3][..]].concat()),
        ErrorKind::InvalidUtf8
    );
    for escape in [
        r"\ud800",
        r"\udfff",
        r"\ud800x",
        r"\ud800\u0041",
        r"\udc00\ud800",
    ] {
        let text = format!(
            r#"{{"kind":"request","request":{{"version":1,"id":1,"operation":{{"operation":"eval","source":"{escape}"}}}}}}"#
        );
        assert_eq!(
            parent_kind(text.as_bytes()),
            ErrorKind::InvalidUtf8,
            "{escape}"
        );
    }
    let pair = br#"{"kind":"request","request":{"version":1,"id":1,"operation":{"operation":"eval","source":"\ud83d\ude00"}}}"#;
    let ParentFrame::Request { request } = decode_parent_frame(pair).unwrap() else {
        panic!()
    };
    assert_eq!(
        request.operation,
        Operation::Eval {
            source: "😀".into()
        }
    );
}

// SPEC §5-a: a repeated key (§5.3) is refused with its sub-kind.
#[test]
fn duplicate_keys_are_rejected_in_records_tags_and_free_form_values() {
    let cases: &[&[u8]] = &[
        br#"{"kind":"request","request":{"version":1,"version":1,"id":1,"operation":{"operation":"eval","source":"x"}}}"#,
        br#"{"kind":"request","request":{"version":1,"id":1,"operation":{"operation":"eval","source":"x","source":"y"}}}"#,
        br#"{"kind":"request","kind":"request","request":{"version":1,"id":1,"operation":{"operation":"eval","source":"x"}}}"#,
        br#"{"request":{"version":1,"id":1,"operation":{"operation":"eval","source":"x"}},"kind":"request","kind":"request"}"#,
        br#"{"kind":"request","request":{"version":1,"id":1,"operation":{"source":"x","operation":"eval","operation":"eval"}}}"#,
        br#"{"kind":"request","request":{"version":1,"id":1,"operation":{"operation":"complete","command":"c","context":{"a":1,"a":1}}}}"#,
        br#"{"kind":"request","request":{"version":1,"id":1,"operation":{"operation":"complete","command":"c","context":[{"x":{"b":1,"b":2}}]}}}"#,
        br#"{"kind":"request","request":{"version":1,"id":1,"operation":{"operation":"complete","context":{"a":1,"a":1},"command":"c"}}}"#,
    ];
    for case in cases {
        assert_eq!(
            parent_kind(case),
            ErrorKind::DuplicateKey,
            "{}",
            String::from_utf8_lossy(case)
        );
    }
    let mut context = context();
    context["environment"] = json!({"A": "1"});
    let text = bytes(&request(
        json!({"operation": "run", "source": "x", "source_name": "r", "context": context}),
    ));
    let dup = String::from_utf8(text)
        .unwrap()
        .replace(r#"{"A":"1"}"#, r#"{"A":"1","A":"2"}"#);
    assert_eq!(parent_kind(dup.as_bytes()), ErrorKind::DuplicateKey);
    let result = br#"{"kind":"response","response":{"version":1,"id":1,"ok":true,"result":{"k":[{"z":1,"z":1}]}}}"#;
    assert_eq!(worker_kind(result), ErrorKind::DuplicateKey);
    // Many keys: the duplicate is found without quadratic work.
    let keys: String = (0..5000).map(|i| format!(r#""k{i}":{i},"#)).collect();
    let many = format!(
        r#"{{"kind":"response","response":{{"version":1,"id":1,"ok":true,"result":{{{keys}"k4999":0}}}}}}"#
    );
    assert_eq!(worker_kind(many.as_bytes()), ErrorKind::DuplicateKey);
}

// SPEC §5.5-a
#[test]
fn records_sent_as_arrays_are_not_objects() {
    let cases: &[&[u8]] = &[
        br#"["request",{"version":1,"id":1,"operation":{"operation":"eval","source":"x"}}]"#,
        br#"{"kind":"request","request":[1,1,{"operation":"eval","source":"x"}]}"#,
        br#"{"kind":"request","request":{"version":1,"id":1,"operation":["eval","x"]}}"#,
        br#"{"kind":"request","request":{"version":1,"id":1,"operation":"eval"}}"#,
        br#"{"kind":"request","request":null}"#,
        br#"42"#,
    ];
    for case in cases {
        assert_eq!(
            parent_kind(case),
            ErrorKind::NotAnObject,
            "{}",
            String::from_utf8_lossy(case)
        );
    }
    let mut frame = parent_frames()[0].1.clone();
    frame["request"]["operation"]["policy"] = json!([true, 1, 1, 1]);
    assert_eq!(parent_kind(&bytes(&frame)), ErrorKind::NotAnObject);
}

// SPEC §5.8-a, §14.1-a: a tag may come last; a tag that is not a string is wrong_type.
#[test]
fn tag_missing_duplicated_or_out_of_order() {
    assert_eq!(parent_kind(br#"{"request":{}}"#), ErrorKind::MissingTag);
    assert_eq!(parent_kind(br#"{}"#), ErrorKind::MissingTag);
    assert_eq!(
        parent_kind(
            br#"{"kind":"request","request":{"version":1,"id":1,"operation":{"source":"x"}}}"#
        ),
        ErrorKind::MissingTag
    );
    assert_eq!(
        parent_kind(br#"{"kind":"request","kind":"host_response","request":{}}"#),
        ErrorKind::DuplicateKey
    );
    assert_eq!(parent_kind(br#"{"kind":1}"#), ErrorKind::WrongType);
    assert_eq!(
        parent_kind(br#"{"kind":"Request"}"#),
        ErrorKind::UnknownVariant
    );
    // Out of order is fine: the decoder does not require Quirl's key order.
    let reordered = br#"{"request":{"operation":{"source":"return 42","operation":"eval"},"id":7,"version":1},"kind":"request"}"#;
    assert_eq!(
        encode_parent_frame(&decode_parent_frame(reordered).unwrap()).unwrap(),
        EVAL
    );
    for (name, frame) in parent_frames() {
        // serde_json's Value sorts keys, which puts many tags last.
        let payload = bytes(&frame);
        let decoded = decode_parent_frame(&payload).unwrap();
        assert_eq!(
            decode_parent_frame(&encode_parent_frame(&decoded).unwrap()).unwrap(),
            decoded,
            "{name}"
        );
    }
}

// SPEC §5.6-a, §5.6-b: integer literals within their width, exact beyond 2^53.
#[test]
fn integers_only_in_their_declared_width() {
    let cases = [
        ("-1", ErrorKind::IntegerOutOfRange),
        ("-0", ErrorKind::WrongType),
        ("1.0", ErrorKind::WrongType),
        ("1e3", ErrorKind::WrongType),
        ("1E3", ErrorKind::WrongType),
        ("\"1\"", ErrorKind::WrongType),
        ("null", ErrorKind::WrongType),
        ("true", ErrorKind::WrongType),
        ("[1]", ErrorKind::WrongType),
        ("18446744073709551616", ErrorKind::IntegerOutOfRange),
        ("-9223372036854775809", ErrorKind::IntegerOutOfRange),
        ("1e400", ErrorKind::WrongType),
        ("01", ErrorKind::MalformedJson),
        ("+1", ErrorKind::MalformedJson),
        ("NaN", ErrorKind::MalformedJson),
        ("Infinity", ErrorKind::MalformedJson),
        ("-Infinity", ErrorKind::MalformedJson),
        ("1.", ErrorKind::MalformedJson),
        (".5", ErrorKind::MalformedJson),
    ];
    for (literal, kind) in cases {
        assert_eq!(parent_kind(&eval_with_id(literal)), kind, "id {literal}");
    }
    for (literal, id) in [
        ("9007199254740993", 9_007_199_254_740_993_u64),
        ("18446744073709551615", u64::MAX),
        ("0", 0),
    ] {
        let payload = eval_with_id(literal);
        let frame = decode_parent_frame(&payload).unwrap();
        let ParentFrame::Request { request } = &frame else {
            panic!()
        };
        assert_eq!(request.id, id);
        assert_eq!(
            encode_parent_frame(&frame).unwrap(),
            payload,
            "exact round trip of {literal}"
        );
    }
}

#[test]
fn u32_overflow_in_call_ids() {
    let call = |call_id: &str| {
        format!(
            r#"{{"kind":"host_call","call":{{"request_id":1,"call_id":{call_id},"command":"x","deadline_ms":1,"max_output_bytes":1}}}}"#
        )
    };
    assert_eq!(
        worker_kind(call("4294967296").as_bytes()),
        ErrorKind::IntegerOutOfRange
    );
    assert_eq!(
        worker_kind(call("18446744073709551616").as_bytes()),
        ErrorKind::IntegerOutOfRange
    );
    assert_eq!(
        worker_kind(call("4294967295").as_bytes()),
        ErrorKind::HostCallLimit
    );
    assert_eq!(worker_kind(call("17").as_bytes()), ErrorKind::HostCallLimit);
    assert_eq!(worker_kind(call("0").as_bytes()), ErrorKind::DomainBounds);
    assert!(decode_worker_frame(call("16").as_bytes()).is_ok());
    let response = |call_id: &str| {
        format!(
            r#"{{"kind":"host_response","response":{{"request_id":1,"call_id":{call_id},"outcome":{{"status":0,"stdout":null,"stderr":null}}}}}}"#
        )
    };
    assert_eq!(
        parent_kind(response("4294967296").as_bytes()),
        ErrorKind::IntegerOutOfRange
    );
    assert_eq!(
        parent_kind(response("17").as_bytes()),
        ErrorKind::HostCallLimit
    );
}

// SPEC §10-a, §10-b: Policy::new refuses out-of-range values; the decoder refuses them again.
#[test]
fn policy_zero_and_max_plus_one_per_field() {
    let fields = [
        ("memory_limit_bytes", POLICY_MEMORY_BYTES_MAX),
        ("instruction_limit", POLICY_INSTRUCTIONS_MAX),
        ("wall_time_ms", POLICY_WALL_TIME_MS_MAX),
    ];
    for (field, max) in fields {
        for (value, ok) in [(0, false), (1, true), (max, true), (max + 1, false)] {
            let mut frame = parent_frames()[0].1.clone();
            frame["request"]["operation"]["policy"][field] = json!(value);
            let result = decode_parent_frame(&bytes(&frame));
            if ok {
                assert!(result.is_ok(), "{field}={value}");
            } else {
                assert_eq!(
                    result.unwrap_err().kind(),
                    ErrorKind::PolicyOutOfRange,
                    "{field}={value}"
                );
            }
        }
    }
    assert_eq!(
        Policy::new(PolicySettings {
            allow_process: true,
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
            allow_process: true,
            memory_limit_bytes: 1,
            instruction_limit: 1,
            wall_time_ms: POLICY_WALL_TIME_MS_MAX + 1
        })
        .unwrap_err()
        .kind(),
        ErrorKind::PolicyOutOfRange
    );
}

// SPEC §8.1-a
#[test]
fn versions_other_than_one_fail_closed() {
    for version in ["0", "2", "4294967295"] {
        let request = format!(
            r#"{{"kind":"request","request":{{"version":{version},"id":1,"operation":{{"operation":"eval","source":"x"}}}}}}"#
        );
        assert_eq!(
            parent_kind(request.as_bytes()),
            ErrorKind::BadVersion,
            "{version}"
        );
        let response = format!(
            r#"{{"kind":"response","response":{{"version":{version},"id":1,"ok":true,"result":1}}}}"#
        );
        assert_eq!(
            worker_kind(response.as_bytes()),
            ErrorKind::BadVersion,
            "{version}"
        );
    }
    let too_wide = br#"{"kind":"request","request":{"version":4294967296,"id":1,"operation":{"operation":"eval","source":"x"}}}"#;
    assert_eq!(parent_kind(too_wide), ErrorKind::IntegerOutOfRange);
    // A future version is refused before its unknown fields are looked at.
    let future = br#"{"kind":"request","request":{"version":2,"id":1,"flags":[],"operation":{"operation":"eval","source":"x"}}}"#;
    assert_eq!(parent_kind(future), ErrorKind::BadVersion);
}

// SPEC §8.2-a: any byte of difference is descriptor_mismatch.
#[test]
fn descriptor_mismatch_fails_closed() {
    for descriptor in [
        "",
        "quirl.lua-worker@2",
        &DESCRIPTOR[..DESCRIPTOR.len() - 1],
        &format!("{DESCRIPTOR} "),
    ] {
        let mut frame = parent_frames()[0].1.clone();
        frame["request"]["operation"]["protocol_descriptor"] = json!(descriptor);
        assert_eq!(parent_kind(&bytes(&frame)), ErrorKind::DescriptorMismatch);
    }
}

#[test]
fn nan_infinity_and_huge_numbers_in_free_form_values() {
    for literal in ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"] {
        let response = format!(
            r#"{{"kind":"response","response":{{"version":1,"id":1,"ok":true,"result":{literal}}}}}"#
        );
        assert_eq!(
            worker_kind(response.as_bytes()),
            ErrorKind::MalformedJson,
            "{literal}"
        );
    }
    for literal in ["1e308", "-0", "1.5", "18446744073709551616"] {
        let response = format!(
            r#"{{"kind":"response","response":{{"version":1,"id":1,"ok":true,"result":{literal}}}}}"#
        );
        assert!(
            decode_worker_frame(response.as_bytes()).is_ok(),
            "{literal}"
        );
    }
}

// SPEC §5.4-a, §5.4-b: 127 levels pass, 128 fail, and 100,000 levels fail without exhausting the
// stack.
#[test]
fn nesting_at_and_past_the_limit() {
    // The response envelope takes two levels; the result fills the rest.
    let nested = |depth: usize| {
        format!(
            r#"{{"kind":"response","response":{{"version":1,"id":1,"ok":true,"result":{}{}}}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        )
    };
    assert!(decode_worker_frame(nested(JSON_DEPTH_MAX - 2).as_bytes()).is_ok());
    assert_eq!(
        worker_kind(nested(JSON_DEPTH_MAX - 1).as_bytes()),
        ErrorKind::DepthExceeded
    );
    assert_eq!(
        worker_kind(nested(100_000).as_bytes()),
        ErrorKind::DepthExceeded
    );
    // The same limit holds when the tag is last and the object is scanned first.
    let deep_context = format!(
        r#"{{"request":{{"version":1,"id":1,"operation":{{"operation":"complete","command":"c","context":{}{}}}}},"kind":"request"}}"#,
        "[".repeat(JSON_DEPTH_MAX),
        "]".repeat(JSON_DEPTH_MAX)
    );
    assert_eq!(
        parent_kind(deep_context.as_bytes()),
        ErrorKind::DepthExceeded
    );
}

// SPEC §5.9-c, §5.9-d
#[test]
fn null_versus_missing_optional_fields() {
    // Omitted-when-absent fields: missing is None, null is rejected.
    let error_null =
        br#"{"kind":"response","response":{"version":1,"id":1,"ok":true,"result":1,"error":null}}"#;
    assert_eq!(worker_kind(error_null), ErrorKind::WrongType);
    let outcome_null = br#"{"kind":"host_response","response":{"request_id":1,"call_id":1,"outcome":null,"error":{"code":"io","message":"m","labels":[],"context":[],"help":[],"command":null,"exit_status":null}}}"#;
    assert_eq!(parent_kind(outcome_null), ErrorKind::WrongType);
    let text_null = event(json!({"kind": "output", "stream": "stdout", "bytes": 1, "text": null}));
    assert_eq!(parent_kind(&bytes(&text_null)), ErrorKind::WrongType);
    // Always-written nullable fields: null is None, missing is rejected.
    let mut record = response_err();
    record["response"]["error"]
        .as_object_mut()
        .unwrap()
        .remove("command");
    assert_eq!(worker_kind(&bytes(&record)), ErrorKind::MissingField);
    let mut record = response_err();
    record["response"]["error"]
        .as_object_mut()
        .unwrap()
        .remove("exit_status");
    assert_eq!(worker_kind(&bytes(&record)), ErrorKind::MissingField);
    let mut record = response_err();
    record["response"]["error"]["labels"][0]
        .as_object_mut()
        .unwrap()
        .remove("source");
    assert_eq!(worker_kind(&bytes(&record)), ErrorKind::MissingField);
    let mut init = parent_frames()[0].1.clone();
    init["request"]["operation"]
        .as_object_mut()
        .unwrap()
        .remove("grants");
    assert_eq!(parent_kind(&bytes(&init)), ErrorKind::MissingField);
    let mut outcome = host_response_outcome();
    outcome["response"]["outcome"]
        .as_object_mut()
        .unwrap()
        .remove("stderr");
    assert_eq!(parent_kind(&bytes(&outcome)), ErrorKind::MissingField);
    let missing_result = br#"{"kind":"response","response":{"version":1,"id":1,"ok":true}}"#;
    assert_eq!(worker_kind(missing_result), ErrorKind::MissingField);
    // And the canonical forms round-trip.
    for (name, frame) in parent_frames() {
        let decoded = decode_parent_frame(&bytes(&frame)).unwrap();
        let encoded = encode_parent_frame(&decoded).unwrap();
        assert_eq!(decode_parent_frame(&encoded).unwrap(), decoded, "{name}");
        assert_eq!(
            encode_parent_frame(&decode_parent_frame(&encoded).unwrap()).unwrap(),
            encoded,
            "{name}"
        );
    }
}

// SPEC §12.1-a
#[test]
fn canonical_encoding_is_byte_exact_for_every_sample() {
    for (name, frame) in worker_frames() {
        let decoded = decode_worker_frame(&bytes(&frame)).unwrap();
        let encoded = encode_worker_frame(&decoded).unwrap();
        assert_eq!(
            encode_worker_frame(&decode_worker_frame(&encoded).unwrap()).unwrap(),
            encoded,
            "{name}"
        );
        // Results keep serde_json::Value's sorted key order, as Quirl writes them.
        let value: Value = serde_json::from_slice(&encoded).unwrap();
        assert_eq!(
            serde_json::to_vec(&value["response"]["result"]).unwrap(),
            quirl_lua_protocol::value::encode_value(&value["response"]["result"]),
            "{name}"
        );
    }
    // Envelope order is declaration order, not sorted.
    let text = String::from_utf8(
        encode_worker_frame(&decode_worker_frame(&bytes(&host_call())).unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(
        text,
        r#"{"kind":"host_call","call":{"request_id":1,"call_id":1,"command":"git status","deadline_ms":100,"max_output_bytes":1024}}"#
    );
}
