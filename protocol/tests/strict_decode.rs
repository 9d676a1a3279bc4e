//! Decoding from a host's own JSON and from wire bytes
//! (`records::StrictDecode`) against the wire decoder, on every golden
//! fixture (`fixtures/manifest.json`, the canonical files included): each
//! payload of each stream decodes through `from_wire_slice` with exactly
//! the wire decoder's verdict (same frame, or same error); through the
//! host path (JSON text) with the same verdict, except that a payload the
//! wire refuses only for a missing list/option member or a `null` member
//! the wire omits may be accepted — and then the record, written out in
//! full by serde, is one the wire accepts; and through the
//! `serde_json::Value` path with the host text path's verdict wherever
//! serde_json could build a `Value` from the payload and the `Value` is
//! still that document (SPEC §5; a `Value` cannot hold a repeated key,
//! whitespace around the text, an integer beyond 64 bits or the order of
//! object keys). Every accepted record also goes to JSON text and to a
//! `Value` with serde and back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::records::{ParentFrame, StrictDecode, WorkerFrame};
use quirl_lua_protocol::{
    ErrorKind, Feed, FrameDecoder, ProtocolError, decode_parent_frame, decode_worker_frame,
};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// Every stream file named by the manifest, with its direction.
fn streams() -> Vec<(String, bool)> {
    let text = std::fs::read_to_string(fixtures_dir().join("manifest.json")).unwrap();
    let entries: Vec<Value> = serde_json::from_str(&text).unwrap();
    let mut files = Vec::new();
    for entry in entries {
        let parent = match entry["direction"].as_str() {
            Some("parent_to_worker") => true,
            Some("worker_to_parent") => false,
            other => panic!("bad direction {other:?} in {entry}"),
        };
        files.push((entry["file"].as_str().unwrap().to_owned(), parent));
        if let Some(canonical) = entry.get("canonical_file").and_then(Value::as_str) {
            files.push((canonical.to_owned(), parent));
        }
    }
    files
}

/// The payloads of a stream, up to its first framing error.
fn payloads(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut decoder = FrameDecoder::new();
    let mut rest = bytes;
    let mut out = Vec::new();
    while !rest.is_empty() {
        match decoder.feed(rest) {
            Ok(Feed::Frame { payload, consumed }) => {
                rest = &rest[consumed..];
                out.push(payload);
            }
            Ok(_) | Err(_) => break,
        }
    }
    out
}

/// Which rule a rejection names; `Ok` for an accepted frame.
fn verdict<T>(result: &Result<T, ProtocolError>) -> Result<(), ErrorKind> {
    result.as_ref().map(drop).map_err(ProtocolError::kind)
}

/// Why a `Value` built by serde_json is not the payload's document, when
/// the wire rejected it for what serde_json drops while parsing: whitespace
/// around the value (SPEC §5.2), a repeated key (§5.3, the last one kept),
/// an integer beyond 64 bits (§5.6, made a float: the `Value` path then
/// says `wrong_type`).
fn lost_in_the_value(payload: &[u8], wire: ErrorKind, value: Result<(), ErrorKind>) -> bool {
    let spaced = |byte: Option<&u8>| byte.is_some_and(u8::is_ascii_whitespace);
    match wire {
        ErrorKind::MalformedJson | ErrorKind::TrailingBytes => {
            spaced(payload.first()) || spaced(payload.last())
        }
        ErrorKind::DuplicateKey => true,
        ErrorKind::IntegerOutOfRange => value == Err(ErrorKind::WrongType),
        _ => false,
    }
}

/// The record as a `Value` sees it: serde_json's `Value` keeps object keys
/// sorted, so an order-keeping record (`StructuredValue::Record`) comes
/// back sorted. Compared as `Value`s, which ignore key order.
fn same_through_a_value<T: serde::Serialize>(left: &T, right: &T) -> bool {
    serde_json::to_value(left).ok() == serde_json::to_value(right).ok()
}

#[derive(Debug, Default)]
struct Counts {
    payloads: usize,
    values: usize,
    accepted: usize,
    rejected: usize,
    lost_in_the_value: usize,
    /// Refused on the wire for an absent or `null` optional member, accepted
    /// from a host's JSON.
    filled_by_the_host_path: usize,
}

fn check<T: StrictDecode + PartialEq + std::fmt::Debug + serde::Serialize>(
    label: &str,
    payload: &[u8],
    wire: Result<T, ProtocolError>,
    failures: &mut Vec<String>,
    counts: &mut Counts,
) {
    counts.payloads += 1;
    // Wire bytes: the wire decoder's verdict, error for error.
    let exact = T::from_wire_slice(payload);
    if exact != wire {
        failures.push(format!("{label}: from_wire_slice {exact:?}, wire {wire:?}"));
    }
    // A host's JSON text: the same verdict, or an acceptance of what only
    // the wire's presence rules refused (SPEC §5.9-c/d).
    let text = T::from_json_slice(payload);
    match (&wire, &text) {
        (wire, text) if wire == text => {}
        (Err(refused), Ok(record))
            if matches!(
                refused.kind(),
                ErrorKind::MissingField | ErrorKind::WrongType
            ) =>
        {
            counts.filled_by_the_host_path += 1;
            let full = serde_json::to_vec(record).unwrap();
            let again = T::from_wire_slice(&full);
            if again.as_ref() != Ok(record) {
                failures.push(format!(
                    "{label}: the host path filled in {record:?}, which the wire refuses when written in full: {again:?}"
                ));
            }
        }
        _ => failures.push(format!("{label}: host text path {text:?}, wire {wire:?}")),
    }
    if let Ok(utf8) = std::str::from_utf8(payload)
        && T::from_json_str(utf8) != text
    {
        failures.push(format!(
            "{label}: from_json_str differs from from_json_slice"
        ));
    }
    let wire = text;
    match &wire {
        Ok(record) => {
            counts.accepted += 1;
            // With serde alone: the record to JSON text and back is the
            // same record; to a `Value` and back, the same up to key order.
            let text = serde_json::to_string(record).map_err(|e| e.to_string());
            let back = text.and_then(|text| T::from_json_str(&text).map_err(|e| e.to_string()));
            if back.as_ref() != Ok(record) {
                failures.push(format!("{label}: to_string and back gave {back:?}"));
            }
            let value = serde_json::to_value(record).map_err(|e| e.to_string());
            match value.and_then(|value| T::from_json_value(&value).map_err(|e| e.to_string())) {
                Ok(back) if same_through_a_value(&back, record) => {}
                other => failures.push(format!("{label}: to_value and back gave {other:?}")),
            }
        }
        Err(_) => counts.rejected += 1,
    }
    // A `Value`, where serde_json can build one from the payload.
    let Ok(value) = serde_json::from_slice::<Value>(payload) else {
        return;
    };
    counts.values += 1;
    let from_value = T::from_json_value(&value);
    match (&wire, &from_value) {
        (Ok(wire), Ok(from_value)) if same_through_a_value(wire, from_value) => {}
        (Err(wire), Err(from_value)) if wire.kind() == from_value.kind() => {}
        (Err(wire), _) if lost_in_the_value(payload, wire.kind(), verdict(&from_value)) => {
            counts.lost_in_the_value += 1;
        }
        _ => failures.push(format!(
            "{label}: value path {:?}, wire {:?}",
            verdict(&from_value),
            verdict(&wire)
        )),
    }
}

#[test]
fn every_fixture_decodes_alike_through_the_wire_the_text_and_the_value_paths() {
    let mut failures = Vec::new();
    let mut counts = Counts::default();
    for (file, parent) in streams() {
        let bytes = std::fs::read(fixtures_dir().join(&file)).unwrap();
        for (index, payload) in payloads(&bytes).iter().enumerate() {
            let label = format!("{file} frame {index}");
            if parent {
                let wire = decode_parent_frame(payload);
                check::<ParentFrame>(&label, payload, wire, &mut failures, &mut counts);
            } else {
                let wire = decode_worker_frame(payload);
                check::<WorkerFrame>(&label, payload, wire, &mut failures, &mut counts);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The corpus is what it claims: hundreds of payloads, most of them
    // also a `Value`, rejections among them.
    assert!(counts.payloads > 600, "{counts:?}");
    assert!(counts.values > 500, "{counts:?}");
    assert!(counts.accepted > 60 && counts.rejected > 150, "{counts:?}");
    // The excused payloads are the few that break a text-only rule.
    assert!(counts.lost_in_the_value < 60, "{counts:?}");
    // Some fixtures leave out optional members (`missing_optional_*`,
    // `null_omitted_*`): the host path fills them in.
    assert!(counts.filled_by_the_host_path >= 5, "{counts:?}");
}

#[test]
fn a_value_too_deep_to_write_out_is_refused_as_too_deep() {
    // SPEC §5.4: far beyond the depth limit, refused before it is written.
    let mut value = Value::Null;
    for _ in 0..100_000 {
        value = Value::Array(vec![value]);
    }
    let error = ParentFrame::from_json_value(&value).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::DepthExceeded);
    std::mem::forget(value); // dropping 100 000 levels recurses too
}

#[test]
fn a_value_just_over_the_depth_limit_is_judged_where_the_wire_judges_it() {
    // One level over JSON_DEPTH_MAX inside a free-form result: the same
    // error (kind, message and JSON path) as the same text on the wire.
    let mut inner = Value::Null;
    for _ in 0..quirl_lua_protocol::limits::JSON_DEPTH_MAX {
        inner = Value::Array(vec![inner]);
    }
    let frame = serde_json::json!({
        "kind": "response",
        "response": {"version": 1, "id": 1, "ok": true, "result": inner}
    });
    let text = serde_json::to_vec(&frame).unwrap();
    let wire = decode_worker_frame(&text).unwrap_err();
    assert_eq!(wire.kind(), ErrorKind::DepthExceeded);
    assert_eq!(WorkerFrame::from_json_value(&frame), Err(wire));
}
