//! Replays the golden fixtures (`fixtures/manifest.json`) through this crate.
//!
//! Every accept stream decodes frame by frame and re-encodes byte for byte
//! (to its `canonical_file` when it has one); every reject stream decodes
//! `frames` good frames and then fails with exactly its tagged sub-kind. Each
//! stream is fed whole and in small chunks, and every small accept stream is
//! also cut at every byte. Failures are collected and reported together, so
//! one run lists every disagreement between the fixtures and the crate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::records::{
    ExtensionEventData, Operation, OperationKind, OperationResult, ParentFrame, WorkerFrame,
};
use quirl_lua_protocol::value::encode_value;
use quirl_lua_protocol::{
    ErrorKind, Feed, FrameDecoder, ProtocolError, decode_parent_frame, decode_worker_frame,
    encode_parent_frame, encode_worker_frame, frame_payload,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ACCEPT_MIN: usize = 60;
const REJECT_MIN: usize = 200;
/// Streams up to this size are also fed one byte at a time and cut at every byte.
const SMALL_STREAM_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    ParentToWorker,
    WorkerToParent,
}

#[derive(Debug)]
enum Decoded {
    Parent(ParentFrame),
    Worker(WorkerFrame),
}

#[derive(Debug)]
struct Entry {
    file: String,
    direction: Direction,
    accept: bool,
    code: Option<String>,
    frames: usize,
    canonical_file: Option<String>,
    operation: Option<String>,
    result_code: Option<String>,
}

/// What decoding a stream produced: the decoded frames and how it ended.
struct Outcome {
    frames: Vec<Decoded>,
    end: Result<(), ProtocolError>,
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn manifest() -> Vec<Entry> {
    let text = std::fs::read_to_string(fixtures_dir().join("manifest.json")).unwrap();
    let entries: Vec<Value> = serde_json::from_str(&text).unwrap();
    entries
        .into_iter()
        .map(|entry| {
            let text = |name: &str| entry.get(name).and_then(Value::as_str).map(str::to_owned);
            let direction = match text("direction").as_deref() {
                Some("parent_to_worker") => Direction::ParentToWorker,
                Some("worker_to_parent") => Direction::WorkerToParent,
                other => panic!("bad direction {other:?} in {entry}"),
            };
            let accept = match text("expect").as_deref() {
                Some("accept") => true,
                Some("reject") => false,
                other => panic!("bad expect {other:?} in {entry}"),
            };
            Entry {
                file: text("file").unwrap(),
                direction,
                accept,
                code: text("code"),
                frames: usize::try_from(entry["frames"].as_u64().unwrap()).unwrap(),
                canonical_file: text("canonical_file"),
                operation: text("operation"),
                result_code: text("result_code"),
            }
        })
        .collect()
}

fn read(file: &str) -> Vec<u8> {
    std::fs::read(fixtures_dir().join(file)).unwrap_or_else(|error| panic!("{file}: {error}"))
}

fn decode_payload(direction: Direction, payload: &[u8]) -> Result<Decoded, ProtocolError> {
    match direction {
        Direction::ParentToWorker => decode_parent_frame(payload).map(Decoded::Parent),
        Direction::WorkerToParent => decode_worker_frame(payload).map(Decoded::Worker),
    }
}

fn encode_framed(frame: &Decoded) -> Result<Vec<u8>, ProtocolError> {
    let payload = match frame {
        Decoded::Parent(frame) => encode_parent_frame(frame)?,
        Decoded::Worker(frame) => encode_worker_frame(frame)?,
    };
    frame_payload(&payload)
}

/// Decode `bytes` as a stream, feeding the push decoder `chunk` bytes at a time.
fn decode_stream(direction: Direction, bytes: &[u8], chunk: usize) -> Outcome {
    let mut decoder = FrameDecoder::new();
    let mut frames = Vec::new();
    for mut piece in bytes.chunks(chunk) {
        while !piece.is_empty() {
            match decoder.feed(piece) {
                Ok(Feed::NeedMore) => piece = &[],
                Ok(Feed::Frame { payload, consumed }) => {
                    piece = &piece[consumed..];
                    match decode_payload(direction, &payload) {
                        Ok(frame) => frames.push(frame),
                        Err(error) => {
                            return Outcome {
                                frames,
                                end: Err(error),
                            };
                        }
                    }
                }
                Ok(other) => panic!("unknown feed outcome {other:?}"),
                Err(error) => {
                    return Outcome {
                        frames,
                        end: Err(error),
                    };
                }
            }
        }
    }
    let end = decoder.finish();
    Outcome { frames, end }
}

/// Check one entry fed in `chunk`-byte pieces; describe every mismatch.
fn check(entry: &Entry, bytes: &[u8], chunk: usize, failures: &mut Vec<String>) {
    let outcome = decode_stream(entry.direction, bytes, chunk);
    let label = format!("{} (chunks of {chunk})", entry.file);
    if entry.accept {
        if let Err(error) = &outcome.end {
            failures.push(format!(
                "{label}: expected accept, got `{}` after {} frame(s): {error}",
                error.kind(),
                outcome.frames.len()
            ));
            return;
        }
        if outcome.frames.len() != entry.frames {
            failures.push(format!(
                "{label}: {} frames decoded, manifest says {}",
                outcome.frames.len(),
                entry.frames
            ));
        }
        let mut encoded = Vec::new();
        for frame in &outcome.frames {
            match encode_framed(frame) {
                Ok(bytes) => encoded.extend_from_slice(&bytes),
                Err(error) => {
                    failures.push(format!("{label}: re-encoding failed: {error}"));
                    return;
                }
            }
        }
        let canonical = entry
            .canonical_file
            .as_deref()
            .map_or_else(|| bytes.to_vec(), read);
        if encoded != canonical {
            failures.push(format!(
                "{label}: re-encoding differs from {}:\n  got:  {}\n  want: {}",
                entry.canonical_file.as_deref().unwrap_or("the file itself"),
                preview(&encoded),
                preview(&canonical)
            ));
        }
    } else {
        let expected = entry.code.as_deref().unwrap_or("<no code>");
        match &outcome.end {
            Ok(()) => failures.push(format!(
                "{label}: expected `{expected}`, but all {} frame(s) were accepted",
                outcome.frames.len()
            )),
            Err(error) if error.kind().as_str() != expected => failures.push(format!(
                "{label}: expected `{expected}`, got `{}`: {error}",
                error.kind()
            )),
            Err(_) => {}
        }
        if outcome.frames.len() != entry.frames {
            failures.push(format!(
                "{label}: {} frame(s) decoded before the error, manifest says {}",
                outcome.frames.len(),
                entry.frames
            ));
        }
    }
}

fn preview(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.len() > 400 {
        let mut end = 400;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}… ({} bytes)", &text[..end], bytes.len())
    } else {
        text.into_owned()
    }
}

/// Offsets at which each frame of a well-formed stream starts, plus the end.
fn frame_boundaries(bytes: &[u8]) -> Vec<usize> {
    let mut boundaries = vec![0];
    let mut offset = 0;
    while offset < bytes.len() {
        let header: [u8; 4] = bytes[offset..offset + 4].try_into().unwrap();
        offset += 4 + usize::try_from(u32::from_be_bytes(header)).unwrap();
        boundaries.push(offset);
    }
    boundaries
}

// SPEC §5-a, §12.1-a, §12.2-a, §3.1-e: every reject fixture fails with exactly its sub-kind, every accept
// fixture re-encodes byte for byte, in several chunkings.
#[test]
fn manifest_replays_through_the_protocol_crate() {
    let entries = manifest();
    let mut failures = Vec::new();
    for entry in &entries {
        let bytes = read(&entry.file);
        check(entry, &bytes, bytes.len().max(1), &mut failures);
        if bytes.len() <= SMALL_STREAM_BYTES {
            check(entry, &bytes, 1, &mut failures);
            check(entry, &bytes, 7, &mut failures);
        } else {
            check(entry, &bytes, 4093, &mut failures);
        }
    }
    assert!(
        failures.is_empty(),
        "{} fixture disagreement(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn accept_streams_cut_at_every_byte_report_truncation() {
    let mut failures = Vec::new();
    for entry in manifest().iter().filter(|entry| entry.accept) {
        let bytes = read(&entry.file);
        if bytes.len() > SMALL_STREAM_BYTES {
            continue;
        }
        let boundaries = frame_boundaries(&bytes);
        for cut in 0..bytes.len() {
            let complete = boundaries.iter().filter(|&&b| b <= cut).count() - 1;
            let start = boundaries[complete];
            let expected = if cut == start {
                None
            } else if cut - start < 4 {
                Some(ErrorKind::TruncatedHeader)
            } else {
                Some(ErrorKind::TruncatedFrame)
            };
            let outcome = decode_stream(entry.direction, &bytes[..cut], bytes.len().max(1));
            let got = outcome.end.as_ref().err().map(ProtocolError::kind);
            if got != expected || outcome.frames.len() != complete {
                failures.push(format!(
                    "{} cut at {cut}: expected {expected:?} after {complete} frame(s), got {got:?} after {}",
                    entry.file,
                    outcome.frames.len()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn manifest_is_complete_and_consistent() {
    let entries = manifest();
    let accepts = entries.iter().filter(|entry| entry.accept).count();
    let rejects = entries.len() - accepts;
    assert!(
        accepts >= ACCEPT_MIN,
        "{accepts} accept fixtures, want ≥ {ACCEPT_MIN}"
    );
    assert!(
        rejects >= REJECT_MIN,
        "{rejects} reject fixtures, want ≥ {REJECT_MIN}"
    );

    let mut listed = BTreeSet::new();
    for entry in &entries {
        assert!(
            listed.insert(entry.file.clone()),
            "{} listed twice",
            entry.file
        );
        if let Some(canonical) = &entry.canonical_file {
            assert!(entry.accept, "{}: canonical_file on a reject", entry.file);
            assert!(listed.insert(canonical.clone()), "{canonical} listed twice");
        }
        match (&entry.code, entry.accept) {
            (None, true) => {}
            (Some(code), false) => assert!(
                ErrorKind::from_name(code).is_some(),
                "{}: unknown sub-kind `{code}`",
                entry.file
            ),
            _ => panic!("{}: a code belongs on rejects and only there", entry.file),
        }
    }
    let on_disk: BTreeSet<String> = std::fs::read_dir(fixtures_dir().join("frames"))
        .unwrap()
        .map(|item| format!("frames/{}", item.unwrap().file_name().to_string_lossy()))
        .filter(|name| name.ends_with(".bin"))
        .collect();
    let orphans: Vec<_> = on_disk.difference(&listed).collect();
    let missing: Vec<_> = listed.difference(&on_disk).collect();
    assert!(orphans.is_empty(), "files not in the manifest: {orphans:?}");
    assert!(
        missing.is_empty(),
        "manifest files not on disk: {missing:?}"
    );
}

/// Responses marked with the operation they answer decode as its typed result.
///
/// Without `result_code` the typed result must decode and re-encode to the
/// same canonical JSON; with it, typed decoding must fail with that sub-kind
/// (the frame itself is valid: only a parent that knows the request in
/// flight can refuse it).
#[test]
fn answers_decode_as_their_operations_typed_result() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for entry in manifest() {
        let Some(operation) = &entry.operation else {
            continue;
        };
        let kind = OperationKind::ALL
            .iter()
            .copied()
            .find(|kind| kind.as_str() == operation)
            .unwrap_or_else(|| panic!("{}: unknown operation {operation}", entry.file));
        let outcome = decode_stream(entry.direction, &read(&entry.file), usize::MAX);
        assert!(outcome.end.is_ok(), "{}: {:?}", entry.file, outcome.end);
        for frame in outcome.frames {
            let Decoded::Worker(WorkerFrame::Response { response }) = frame else {
                panic!(
                    "{}: `operation` on a frame that is not a response",
                    entry.file
                );
            };
            let Ok(value) = &response.result else {
                continue;
            };
            checked += 1;
            let typed = OperationResult::decode(kind, value);
            match (&entry.result_code, typed) {
                (None, Ok(result)) => {
                    let again = result.to_value().map(|v| encode_value(&v));
                    if !result.fits(kind) || again.as_ref().ok() != Some(&encode_value(value)) {
                        failures.push(format!(
                            "{}: the typed {operation} result does not re-encode to the same JSON",
                            entry.file
                        ));
                    }
                }
                (None, Err(error)) => failures.push(format!(
                    "{}: typed {operation} result refused: {error}",
                    entry.file
                )),
                (Some(code), Ok(_)) => failures.push(format!(
                    "{}: typed {operation} result accepted, want `{code}`",
                    entry.file
                )),
                (Some(code), Err(error)) if error.kind().as_str() != code => {
                    failures.push(format!(
                        "{}: want `{code}`, got `{}`: {error}",
                        entry.file,
                        error.kind()
                    ))
                }
                (Some(_), Err(_)) => {}
            }
        }
    }
    assert!(checked >= 40, "only {checked} typed results checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every sub-kind a single stream can show has at least one reject fixture.
///
/// Only the session kinds need a conversation (`host_call_limit` does not: a
/// call id above 16 is visible in the frame itself). `io_error` belongs to
/// the blocking adapters, not to bytes.
#[test]
fn every_stream_level_sub_kind_has_a_reject_fixture() {
    // Kinds no byte stream alone can produce: session and end-of-stream
    // rules (tested in sessions.rs and connections.rs) and the caller's own
    // mistakes, which never reach the wire (SPEC §11.2).
    let session_only = [
        ErrorKind::IdentityMismatch,
        ErrorKind::UnexpectedFrame,
        ErrorKind::SessionPoisoned,
        ErrorKind::UnexpectedEnd,
        ErrorKind::InvalidUse,
        ErrorKind::WorkerRetired,
        // The parent's own clock and cancellation (SPEC §10, §13.2).
        ErrorKind::DeadlinePassed,
        ErrorKind::Cancelled,
    ];
    let tagged: BTreeSet<String> = manifest()
        .into_iter()
        .filter_map(|entry| entry.code)
        .collect();
    let untested: Vec<&str> = ErrorKind::ALL
        .iter()
        .filter(|kind| !session_only.contains(kind))
        .map(|kind| kind.as_str())
        .filter(|name| !tagged.contains(*name) && *name != "io_error")
        .collect();
    assert!(
        untested.is_empty(),
        "sub-kinds without a reject fixture: {untested:?}"
    );
}

/// Every frame kind, operation and event variant has an accept fixture.
#[test]
fn accept_fixtures_cover_every_frame_kind_operation_and_event() {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for entry in manifest().iter().filter(|entry| entry.accept) {
        let outcome = decode_stream(entry.direction, &read(&entry.file), usize::MAX);
        for frame in outcome.frames {
            let mut note = |name: String| *seen.entry(name).or_default() += 1;
            match frame {
                Decoded::Parent(ParentFrame::Request { request }) => {
                    note("frame:request".to_owned());
                    note(format!("operation:{}", request.operation.kind().as_str()));
                    if let Operation::Event { event } = &request.operation {
                        note(format!("event:{}", event_kind(&event.data)));
                    }
                }
                Decoded::Parent(ParentFrame::HostResponse { .. }) => {
                    note("frame:host_response".to_owned());
                }
                Decoded::Worker(WorkerFrame::Response { response }) => {
                    note(format!("frame:response:{}", response.result.is_ok()));
                }
                Decoded::Worker(WorkerFrame::HostCall { .. }) => note("frame:host_call".to_owned()),
            }
        }
    }
    let mut wanted: Vec<String> = [
        "frame:request",
        "frame:host_response",
        "frame:response:true",
        "frame:response:false",
        "frame:host_call",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    wanted.extend(
        quirl_lua_protocol::records::OperationKind::ALL
            .iter()
            .map(|kind| format!("operation:{}", kind.as_str())),
    );
    wanted.extend(
        [
            "session_start",
            "session_restore",
            "directory_changed",
            "command_plan",
            "execution_progress",
            "output",
            "cancellation",
            "result",
            "error",
        ]
        .iter()
        .map(|kind| format!("event:{kind}")),
    );
    let missing: Vec<_> = wanted
        .iter()
        .filter(|name| !seen.contains_key(*name))
        .collect();
    assert!(missing.is_empty(), "no accept fixture for {missing:?}");
}

fn event_kind(data: &ExtensionEventData) -> &'static str {
    match data {
        ExtensionEventData::SessionStart { .. } => "session_start",
        ExtensionEventData::SessionRestore { .. } => "session_restore",
        ExtensionEventData::DirectoryChanged { .. } => "directory_changed",
        ExtensionEventData::CommandPlan { .. } => "command_plan",
        ExtensionEventData::ExecutionProgress { .. } => "execution_progress",
        ExtensionEventData::Output { .. } => "output",
        ExtensionEventData::Cancellation { .. } => "cancellation",
        ExtensionEventData::Result { .. } => "result",
        ExtensionEventData::Error { .. } => "error",
    }
}

/// SPEC §5.10-b: a payload with several defects is named by its first
/// defect in reading order. The `several_defects_*` fixtures each hold two
/// or three defects, chosen so that a simpler rule (the first defect in
/// the text, the first record-level one) would name another: each decodes
/// to its tagged sub-kind, and one payload shows the stages in turn — with
/// a byte order mark, without it, without the invalid byte.
#[test]
fn several_defects_name_the_first_in_reading_order() {
    let entries: Vec<Entry> = manifest()
        .into_iter()
        .filter(|entry| entry.file.starts_with("frames/several_defects_"))
        .collect();
    assert!(
        entries.len() >= 8,
        "{} several_defects fixtures",
        entries.len()
    );
    let kinds: BTreeSet<String> = entries.iter().filter_map(|e| e.code.clone()).collect();
    // The order's every stage is represented: payload bytes, text, close.
    for kind in [
        "byte_order_mark",
        "invalid_utf8",
        "unknown_field",
        "duplicate_key",
        "wrong_type",
        "malformed_json",
    ] {
        assert!(
            kinds.contains(kind),
            "no several_defects fixture names {kind}"
        );
    }
    for entry in &entries {
        let bytes = read(&entry.file);
        let payload = &bytes[4..];
        let error = match decode_payload(entry.direction, payload) {
            Ok(_) => panic!("{} decoded", entry.file),
            Err(error) => error,
        };
        assert_eq!(
            Some(error.kind().as_str()),
            entry.code.as_deref(),
            "{}: {error}",
            entry.file
        );
    }
    // The order between the stages, on one payload: without the byte order
    // mark, the invalid byte is named; without that too, the malformed text.
    let eval = br#"{"kind":"request","request":{"version":1,"id":1,"operation":{"operation":"eval","source":"return 1"}}}"#;
    let malformed =
        String::from_utf8_lossy(eval).replace(r#""kind":"request","#, r#""kind":"request",,"#);
    let mut invalid = malformed.clone().into_bytes();
    let at = invalid.len() - 5;
    invalid.insert(at, 0xff);
    let mut marked = vec![0xef, 0xbb, 0xbf];
    marked.extend_from_slice(&invalid);
    let kind = |payload: &[u8]| decode_parent_frame(payload).unwrap_err().kind();
    assert_eq!(kind(&marked), ErrorKind::ByteOrderMark);
    assert_eq!(kind(&invalid), ErrorKind::InvalidUtf8);
    assert_eq!(kind(malformed.as_bytes()), ErrorKind::MalformedJson);
}
