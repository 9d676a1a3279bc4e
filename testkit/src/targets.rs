//! The fuzz targets as plain functions: each takes arbitrary bytes and
//! panics on a property violation. `fuzz_targets/*.rs` call them under
//! libFuzzer; `protocol/tests/fuzz_corpus_replay.rs` calls them on every
//! committed corpus and crash file on stable; the proptest properties call
//! some of them too.
//!
//! The oracles here are written from SPEC.md, independently of the crate's
//! own checks: policy and error-record validity (`oracle`), an independent
//! frame splitter (`reference_split`), and `serde_json` as a plain-JSON
//! reference (a strictly accepted payload must be JSON, and must carry the
//! same JSON value as its canonical re-encoding).

use crate::generate::{self, Json, Source};
use quirl_lua_protocol::records::{
    ErrorCode, ErrorLabel, ExecutionInput, ExtensionEventData, HostResponse, Operation,
    ParentFrame, Policy, PolicySettings, Response, ShellError, WorkerFrame,
};
use quirl_lua_protocol::{
    ErrorKind, Feed, FrameDecoder, ProtocolError, WireFrame, decode_parent_frame,
    decode_worker_frame, encode_parent_frame, encode_worker_frame, frame_payload, read_payload,
};
use serde_json::Value;

/// Independent oracles, from the ranges of SPEC.md §6.8 and §10 (literals on purpose).
pub mod oracle {
    use quirl_lua_protocol::records::ShellError;

    /// `memory_limit_bytes` upper bound (64 MiB).
    pub const MEMORY_MAX: u64 = 67_108_864;
    /// `instruction_limit` upper bound.
    pub const INSTRUCTIONS_MAX: u64 = 100_000_000;
    /// `wall_time_ms` upper bound.
    pub const WALL_MAX: u64 = 60_000;
    /// Items per list of an error record.
    pub const ITEMS_MAX: usize = 64;
    /// Text bytes of an error record.
    pub const TEXT_MAX: usize = 262_144;
    /// The frame payload bound.
    pub const FRAME_MAX: usize = 5_242_880;
    /// Host calls per request.
    pub const CALLS_MAX: u32 = 16;

    /// Whether a policy lies in the v1 ranges.
    pub fn policy_ok(memory: u64, instructions: u64, wall: u64) -> bool {
        (1..=MEMORY_MAX).contains(&memory)
            && (1..=INSTRUCTIONS_MAX).contains(&instructions)
            && (1..=WALL_MAX).contains(&wall)
    }

    fn on_boundary(text: &str, index: usize) -> bool {
        let bytes = text.as_bytes();
        index == bytes.len() || (index < bytes.len() && bytes[index] & 0xC0 != 0x80)
    }

    /// UTF-8 bytes of all text of an error record (SPEC §6.8).
    pub fn text_bytes(error: &ShellError) -> u128 {
        let mut text = error.message.len() as u128;
        for label in &error.labels {
            text += label.message.len() as u128;
            text += label.source.as_ref().map_or(0, String::len) as u128;
        }
        for line in error.context.iter().chain(&error.help) {
            text += line.len() as u128;
        }
        text + error.command.as_ref().map_or(0, String::len) as u128
    }

    /// Whether an error record is within the v1 bounds.
    pub fn error_record_ok(error: &ShellError) -> bool {
        if error.labels.len() > ITEMS_MAX
            || error.context.len() > ITEMS_MAX
            || error.help.len() > ITEMS_MAX
        {
            return false;
        }
        for label in &error.labels {
            if label.start > label.end {
                return false;
            }
            if let Some(source) = &label.source {
                let (start, end) = (label.start as usize, label.end as usize);
                if end <= source.len() && !(on_boundary(source, start) && on_boundary(source, end))
                {
                    return false;
                }
            }
        }
        text_bytes(error) <= TEXT_MAX as u128
    }
}

// ----- helpers ----------------------------------------------------------------

/// Kinds that only framing or a session can produce, never a payload decoder.
fn payload_decoder_may_report(kind: ErrorKind) -> bool {
    !matches!(
        kind,
        ErrorKind::EmptyFrame
            | ErrorKind::OversizedFrame
            | ErrorKind::TruncatedHeader
            | ErrorKind::TruncatedFrame
            | ErrorKind::IdentityMismatch
            | ErrorKind::UnexpectedFrame
            | ErrorKind::SessionPoisoned
            | ErrorKind::IoError
    )
}

/// JSON value equality that tolerates a last-bit difference in floats
/// (`serde_json` without `float_roundtrip` may parse a float 1 ulp off).
fn same_json(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Number(a), Value::Number(b)) => {
            if a.is_f64() || b.is_f64() {
                match (a.as_f64(), b.as_f64()) {
                    (Some(x), Some(y)) => {
                        x == y
                            || (x.to_bits().abs_diff(y.to_bits()) <= 2 && x.signum() == y.signum())
                    }
                    _ => false,
                }
            } else {
                a == b
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(key, x)| b.get(key).is_some_and(|y| same_json(x, y)))
        }
        _ => left == right,
    }
}

/// Check a payload the strict decoder rejected: a payload-level kind, and
/// the payload-level rules decided first.
fn check_rejected(payload: &[u8], error: &ProtocolError) {
    assert!(
        payload_decoder_may_report(error.kind()),
        "payload decoder reported a framing/session kind: {error}"
    );
    if payload.starts_with(&[0xEF, 0xBB, 0xBF]) {
        assert_eq!(error.kind(), ErrorKind::ByteOrderMark, "{error}");
    } else if std::str::from_utf8(payload).is_err() {
        assert_eq!(error.kind(), ErrorKind::InvalidUtf8, "{error}");
    } else if serde_json::from_slice::<Value>(payload).is_err() {
        // Not JSON at all: must be one of the JSON-level kinds.
        assert!(
            matches!(
                error.kind(),
                ErrorKind::MalformedJson
                    | ErrorKind::TrailingBytes
                    | ErrorKind::DepthExceeded
                    | ErrorKind::InvalidUtf8
                    // A record error may be found before the syntax error.
                    | ErrorKind::NotAnObject
                    | ErrorKind::WrongType
                    | ErrorKind::IntegerOutOfRange
                    | ErrorKind::UnknownField
                    | ErrorKind::MissingField
                    | ErrorKind::UnknownVariant
                    | ErrorKind::MissingTag
                    | ErrorKind::DuplicateKey
                    | ErrorKind::BadVersion
                    | ErrorKind::DescriptorMismatch
                    | ErrorKind::PolicyOutOfRange
                    | ErrorKind::ErrorRecordBounds
                    | ErrorKind::DomainBounds
                    | ErrorKind::HostCallLimit
                    | ErrorKind::InconsistentResponse
                    | ErrorKind::InconsistentHostResponse
            ),
            "{error}"
        );
    }
}

/// Invariants every accepted error record must satisfy (independent oracle).
fn check_error_record(error: &ShellError) {
    assert!(
        oracle::error_record_ok(error),
        "decoder accepted an error record outside the v1 bounds: {error:?}"
    );
}

fn check_operation(operation: &Operation) {
    match operation {
        Operation::Initialize {
            protocol_descriptor,
            policy,
            ..
        } => {
            assert!(protocol_descriptor.starts_with("quirl.lua-worker@1{"));
            assert!(protocol_descriptor.contains("frame:u32be-length<=5242880+json"));
            assert!(oracle::policy_ok(
                policy.memory_limit_bytes(),
                policy.instruction_limit(),
                policy.wall_time_ms()
            ));
        }
        Operation::Eval { source }
        | Operation::Check { source, .. }
        | Operation::LoadConfig { source, .. }
        | Operation::LoadPlugin { source, .. }
        | Operation::Run { source, .. }
        | Operation::Test { source, .. } => assert!(source.len() <= 4 * 1024 * 1024),
        Operation::PluginCommand { deadline_ms, .. } => assert!(*deadline_ms >= 1),
        Operation::Event { event } => {
            if let ExtensionEventData::Error { error } = &event.data {
                check_error_record(error);
            }
        }
        Operation::RenderPrompt { .. }
        | Operation::Complete { .. }
        | Operation::Contribution { .. } => {}
    }
    if let Operation::Run { context, .. } | Operation::PluginCommand { context, .. } = operation {
        assert!(!context.working_directory.is_empty());
        for (name, value) in &context.environment {
            assert!(!name.is_empty() && !name.contains('=') && !name.contains('\0'));
            assert!(!value.contains('\0'));
        }
        if let ExecutionInput::Bytes(bytes) = &context.input {
            assert!(bytes.len() <= 8 * 1024 * 1024);
        }
    }
}

fn check_parent_invariants(frame: &ParentFrame) {
    match frame {
        ParentFrame::Request { request } => check_operation(&request.operation),
        ParentFrame::HostResponse { response } => {
            assert!((1..=oracle::CALLS_MAX).contains(&response.call_id));
            if let Err(error) = &response.result {
                check_error_record(error);
            }
        }
    }
}

fn check_worker_invariants(frame: &WorkerFrame) {
    match frame {
        WorkerFrame::Response { response } => {
            if let Err(error) = &response.result {
                check_error_record(error);
            }
        }
        WorkerFrame::HostCall { call } => {
            assert!((1..=oracle::CALLS_MAX).contains(&call.call_id));
            assert!(call.command.len() <= 1024 * 1024);
            assert!(call.max_output_bytes <= 1024 * 1024);
        }
    }
}

/// Everything an accepted payload must satisfy, per direction.
fn check_accepted<F: WireFrame + PartialEq + std::fmt::Debug>(payload: &[u8], frame: &F) {
    let as_json: Value = serde_json::from_slice(payload).unwrap_or_else(|error| {
        panic!("strictly accepted payload is not JSON for serde_json: {error}")
    });
    let canonical = frame
        .encode()
        .unwrap_or_else(|error| panic!("accepted frame cannot be re-encoded: {error}"));
    let again = F::decode(&canonical)
        .unwrap_or_else(|error| panic!("canonical re-encoding is rejected: {error}"));
    assert_eq!(&again, frame, "decode(encode(frame)) differs");
    let canonical_again = again
        .encode()
        .unwrap_or_else(|error| panic!("re-encoding failed: {error}"));
    assert_eq!(canonical, canonical_again, "encoding is not stable");
    let canonical_json: Value = serde_json::from_slice(&canonical)
        .unwrap_or_else(|error| panic!("canonical payload is not JSON: {error}"));
    assert!(
        same_json(&as_json, &canonical_json),
        "the decoder dropped or defaulted something:\n input {as_json}\n canon {canonical_json}"
    );
    assert_compact(&canonical);
    if payload == canonical.as_slice() {
        return;
    }
    // A non-canonical input differs from its canonical form only in layout.
    assert!(payload.len() >= canonical.len() || has_escape_or_number_variant(payload));
}

/// No whitespace outside strings.
fn assert_compact(payload: &[u8]) {
    let mut in_string = false;
    let mut escaped = false;
    for (offset, &byte) in payload.iter().enumerate() {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if byte == b'"' {
            in_string = true;
        } else {
            assert!(
                !matches!(byte, b' ' | b'\t' | b'\n' | b'\r'),
                "canonical payload has whitespace at byte {offset}"
            );
        }
    }
}

fn has_escape_or_number_variant(payload: &[u8]) -> bool {
    // Shorter-than-canonical inputs exist: `1e2` vs `100.0`, or a `\u00e9`
    // escape vs two raw bytes the other way round. Only accept the claim if
    // such a token is present.
    payload
        .iter()
        .any(|byte| matches!(byte, b'e' | b'E' | b'.' | b'\\'))
}

// ----- target: push decoder with arbitrary chunking -------------------------

/// How a byte stream ended, as the decoder reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// End of stream at a frame boundary.
    Clean,
    /// A sticky error of this kind.
    Failed(ErrorKind),
}

/// The independent reference: split a stream per SPEC.md §4.3.
pub fn reference_split(stream: &[u8], max: usize) -> (Vec<Vec<u8>>, Ending) {
    let mut frames = Vec::new();
    let mut rest = stream;
    loop {
        if rest.is_empty() {
            return (frames, Ending::Clean);
        }
        if rest.len() < 4 {
            return (frames, Ending::Failed(ErrorKind::TruncatedHeader));
        }
        let declared = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if declared == 0 {
            return (frames, Ending::Failed(ErrorKind::EmptyFrame));
        }
        if declared > max {
            return (frames, Ending::Failed(ErrorKind::OversizedFrame));
        }
        if rest.len() - 4 < declared {
            return (frames, Ending::Failed(ErrorKind::TruncatedFrame));
        }
        frames.push(rest[4..4 + declared].to_vec());
        rest = &rest[4 + declared..];
    }
}

/// Feed `stream` in the given chunk sizes (cycled; 0 feeds an empty slice
/// and then one byte), checking the decoder's local promises as it goes.
fn run_decoder(stream: &[u8], max: usize, plan: &[usize]) -> (Vec<Vec<u8>>, Ending) {
    const MEMORY_BOUND: usize = 64 * 1024;
    let mut decoder = FrameDecoder::with_max_payload(max);
    let mut frames = Vec::new();
    let mut offset = 0;
    let mut step = 0;
    let mut since_boundary = 0_usize;
    let mut consumed_total = 0_usize;
    let mut boundary = 0_usize;
    while offset < stream.len() {
        let mut size = plan
            .get(step % plan.len().max(1))
            .copied()
            .unwrap_or(usize::MAX);
        step += 1;
        if size == 0 {
            match decoder.feed(&[]) {
                Ok(Feed::NeedMore) => {}
                Ok(Feed::Frame { .. }) => panic!("an empty feed produced a frame"),
                Ok(other) => panic!("unknown feed outcome {other:?}"),
                Err(error) => return sticky(&mut decoder, frames, error),
            }
            size = 1;
        }
        let end = offset.saturating_add(size).min(stream.len());
        let mut chunk = &stream[offset..end];
        offset = end;
        while !chunk.is_empty() {
            let wanted = decoder.bytes_wanted();
            assert!(wanted >= 1, "bytes_wanted must be at least 1");
            match decoder.feed(chunk) {
                Ok(Feed::NeedMore) => {
                    since_boundary += chunk.len();
                    consumed_total += chunk.len();
                    assert!(
                        !decoder.is_at_boundary(),
                        "NeedMore after {} bytes, but the decoder is at a frame boundary",
                        chunk.len()
                    );
                    let capacity = decoder.buffer_capacity();
                    assert!(
                        capacity <= MEMORY_BOUND.max(2 * since_boundary),
                        "decoder reserved {capacity} bytes after {since_boundary} arrived"
                    );
                    chunk = &[];
                }
                Ok(Feed::Frame { payload, consumed }) => {
                    assert!(consumed >= 1 && consumed <= chunk.len(), "bad consumed");
                    consumed_total += consumed;
                    boundary += 4 + payload.len();
                    assert_eq!(
                        consumed_total, boundary,
                        "consumed bytes do not end at the frame end"
                    );
                    assert!(
                        decoder.is_at_boundary(),
                        "decoder not idle at a frame boundary"
                    );
                    frames.push(payload);
                    chunk = &chunk[consumed..];
                    since_boundary = 0;
                }
                Ok(other) => panic!("unknown feed outcome {other:?}"),
                Err(error) => return sticky(&mut decoder, frames, error),
            }
        }
    }
    match decoder.finish() {
        Ok(()) => (frames, Ending::Clean),
        Err(error) => sticky(&mut decoder, frames, error),
    }
}

/// After an error, the decoder must repeat it forever.
fn sticky(
    decoder: &mut FrameDecoder,
    frames: Vec<Vec<u8>>,
    error: ProtocolError,
) -> (Vec<Vec<u8>>, Ending) {
    assert_eq!(
        decoder.buffer_capacity(),
        0,
        "a failed decoder keeps its buffer"
    );
    for _ in 0..2 {
        match decoder.feed(&[0, 0, 0, 1, b'1']) {
            Ok(_) => panic!("a failed decoder accepted more bytes"),
            Err(again) => assert_eq!(again.kind(), error.kind()),
        }
        match decoder.finish() {
            Ok(_) => panic!("a failed decoder finished cleanly"),
            Err(again) => assert_eq!(again.kind(), error.kind()),
        }
    }
    (frames, Ending::Failed(error.kind()))
}

/// A reader that hands out the stream in planned chunk sizes and records
/// how far it was read.
struct ChunkReader<'a> {
    stream: &'a [u8],
    offset: usize,
    plan: &'a [usize],
    step: usize,
}

impl std::io::Read for ChunkReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let planned = self.plan.get(self.step % self.plan.len().max(1)).copied();
        self.step += 1;
        let size = planned.unwrap_or(usize::MAX).max(1).min(buf.len());
        let end = self.offset.saturating_add(size).min(self.stream.len());
        let count = end - self.offset;
        buf[..count].copy_from_slice(&self.stream[self.offset..end]);
        self.offset = end;
        Ok(count)
    }
}

fn run_blocking(stream: &[u8], plan: &[usize]) -> (Vec<Vec<u8>>, Ending) {
    let mut reader = ChunkReader {
        stream,
        offset: 0,
        plan,
        step: 0,
    };
    let mut frames: Vec<Vec<u8>> = Vec::new();
    let mut boundary = 0;
    loop {
        match read_payload(&mut reader) {
            Ok(Some(payload)) => {
                boundary += 4 + payload.len();
                assert_eq!(reader.offset, boundary, "read_payload read past its frame");
                frames.push(payload);
            }
            Ok(None) => return (frames, Ending::Clean),
            Err(error) => return (frames, Ending::Failed(error.kind())),
        }
    }
}

/// Decode the chunk plan: `control & 0x0f` size bytes follow the control byte.
fn chunk_plan(sizes: &[u8]) -> Vec<usize> {
    if sizes.is_empty() {
        return vec![1];
    }
    sizes
        .iter()
        .map(|&byte| match byte {
            0xff => 0,
            0x80..=0xfe => (usize::from(byte) - 0x7f) * 256,
            _ => usize::from(byte) + 1,
        })
        .collect()
}

/// Target `decoder_chunking`: the push decoder, fed in fuzzer-chosen chunks,
/// agrees with one-piece decoding, with the blocking adapter and with an
/// independent reference splitter: same payloads, same ending; errors are
/// sticky; memory grows only with bytes received.
///
/// Input: a control byte (`& 0x0f`: number of chunk-size bytes; `>> 4 & 7`:
/// payload limit class; `& 0x80`: direction for decoding the payloads),
/// the chunk sizes, then the stream.
pub fn decoder_chunking(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let count = usize::from(control & 0x0f).min(rest.len());
    let (sizes, stream) = rest.split_at(count);
    const LIMITS: [usize; 8] = [
        oracle::FRAME_MAX,
        1,
        2,
        16,
        100,
        4096,
        65_536,
        oracle::FRAME_MAX - 1,
    ];
    let max = LIMITS[usize::from(control >> 4 & 7)];
    let plan = chunk_plan(sizes);

    let expected = reference_split(stream, max);
    let whole = run_decoder(stream, max, &[usize::MAX]);
    assert_eq!(
        whole, expected,
        "one-piece decoding disagrees with the reference"
    );
    let chunked = run_decoder(stream, max, &plan);
    assert_eq!(
        chunked, expected,
        "chunked decoding disagrees with one-piece decoding"
    );
    let bytewise = run_decoder(stream, max, &[1]);
    assert_eq!(bytewise, expected, "byte-by-byte decoding disagrees");
    if max == oracle::FRAME_MAX {
        let blocking = run_blocking(stream, &plan);
        assert_eq!(
            blocking, expected,
            "read_payload disagrees with the push decoder"
        );
    }
    for payload in expected.0.iter().take(4) {
        if control & 0x80 == 0 {
            parent_frame(payload);
        } else {
            worker_frame(payload);
        }
    }
}

// ----- targets: one payload per direction ------------------------------------

/// Target `parent_frame`: strict decoding of a parent→worker payload.
/// Accepted payloads are JSON, re-encode canonically and stably, lose
/// nothing, and satisfy the independent domain oracles; rejections carry a
/// payload-level kind.
pub fn parent_frame(data: &[u8]) {
    match decode_parent_frame(data) {
        Ok(frame) => {
            check_accepted(data, &frame);
            check_parent_invariants(&frame);
            let other = decode_worker_frame(data);
            assert!(other.is_err(), "a payload decodes in both directions");
        }
        Err(error) => check_rejected(data, &error),
    }
}

/// Target `worker_frame`: strict decoding of a worker→parent payload.
pub fn worker_frame(data: &[u8]) {
    match decode_worker_frame(data) {
        Ok(frame) => {
            check_accepted(data, &frame);
            check_worker_invariants(&frame);
            let other = decode_parent_frame(data);
            assert!(other.is_err(), "a payload decodes in both directions");
        }
        Err(error) => check_rejected(data, &error),
    }
}

// ----- target: structure-aware round trip -----------------------------------

fn round_trip_one<F: WireFrame + PartialEq + std::fmt::Debug>(
    frame: &F,
    src: &mut Source<'_>,
    direction: Direction,
) {
    let bytes = frame
        .encode()
        .unwrap_or_else(|error| panic!("a valid frame failed to encode: {error}\n{frame:?}"));
    let decoded =
        F::decode(&bytes).unwrap_or_else(|error| panic!("own encoding rejected: {error}"));
    assert_eq!(&decoded, frame, "decode(encode(frame)) != frame");
    let again = decoded
        .encode()
        .unwrap_or_else(|error| panic!("re-encoding failed: {error}"));
    assert_eq!(again, bytes, "encoding is not canonical/stable");
    let framed = frame
        .encode_framed()
        .unwrap_or_else(|error| panic!("framing failed: {error}"));
    assert_eq!(framed[..4], (bytes.len() as u32).to_be_bytes());
    assert_eq!(framed[4..], bytes[..]);
    assert_eq!(frame_payload(&bytes).ok(), Some(framed.clone()));
    assert!(serde_json::from_slice::<Value>(&bytes).is_ok(), "not JSON");
    assert_compact(&bytes);
    // The other direction never accepts it.
    let other = match direction {
        Direction::Parent => decode_worker_frame(&bytes).is_ok(),
        Direction::Worker => decode_parent_frame(&bytes).is_ok(),
    };
    assert!(!other, "a frame decodes in both directions");
    // Any member order and whitespace between tokens decode to the same frame.
    let text = String::from_utf8(bytes.clone()).unwrap_or_default();
    let tree = Json::parse(&text).unwrap_or_else(|| panic!("tree parser failed: {text}"));
    assert_free_form_keys_sorted(&tree, direction, &text);
    let keep = keep_order(&tree, direction);
    let mut shuffled = String::new();
    write_shuffled(&tree, src, &keep, &mut 0, &mut shuffled);
    let reordered = F::decode(shuffled.as_bytes())
        .unwrap_or_else(|error| panic!("reordered frame rejected: {error}\n{shuffled}"));
    assert_eq!(
        &reordered, frame,
        "member order changed the frame\n{shuffled}"
    );
    assert_eq!(
        reordered.encode().ok().as_deref(),
        Some(bytes.as_slice()),
        "reordered frame re-encodes differently"
    );
}

/// Target `round_trip`: valid frames built from the input — by the
/// protocol crate's `arbitrary::Arbitrary` (feature `arbitrary`) or by this
/// kit's boundary-biased generator — encode, decode back equal, re-encode
/// identically (canonical, compact), and decode equal whatever the member
/// order and inter-token whitespace; and any other record built by
/// `Arbitrary` goes through serde and the strict wire decoder back to an
/// equal record ([`record_round_trip`]).
pub fn round_trip(data: &[u8]) {
    let mut src = Source::new(data);
    match src.byte() % 5 {
        0 => {
            let frame = generate::parent_frame(&mut src);
            round_trip_one(&frame, &mut src, Direction::Parent);
        }
        1 => {
            let frame = generate::worker_frame(&mut src);
            round_trip_one(&frame, &mut src, Direction::Worker);
        }
        2 => {
            if let Some(frame) = src.arbitrary::<ParentFrame>() {
                round_trip_one(&frame, &mut src, Direction::Parent);
            }
        }
        3 => {
            if let Some(frame) = src.arbitrary::<WorkerFrame>() {
                round_trip_one(&frame, &mut src, Direction::Worker);
            }
        }
        _ => record_round_trip(&mut src),
    }
}

/// One record of a type chosen by the input, built by `Arbitrary`:
/// `serde_json::to_vec`, then `StrictDecode::from_wire_slice`, gives an
/// equal record (SPEC §12.2); an operation's result goes through
/// `OperationResult::to_value` and `decode` for that operation.
pub fn record_round_trip(src: &mut Source<'_>) {
    use quirl_lua_protocol::records::*;

    fn through_the_wire<T>(src: &mut Source<'_>)
    where
        T: for<'b> arbitrary::Arbitrary<'b>
            + StrictDecode
            + serde::Serialize
            + PartialEq
            + std::fmt::Debug,
    {
        let Some(record) = src.arbitrary::<T>() else {
            return;
        };
        let text = serde_json::to_vec(&record)
            .unwrap_or_else(|error| panic!("{record:?} cannot be serialized: {error}"));
        match T::from_wire_slice(&text) {
            Ok(back) => assert_eq!(back, record, "{}", String::from_utf8_lossy(&text)),
            Err(error) => panic!(
                "{record:?} is refused on the wire: {error}\n{}",
                String::from_utf8_lossy(&text)
            ),
        }
    }

    macro_rules! records {
        ($($ty:ty),* $(,)?) => {
            const CHOICES: &[fn(&mut Source<'_>)] = &[$(through_the_wire::<$ty>),*];
        };
    }
    records!(
        Request,
        Response,
        Operation,
        HostCall,
        HostResponse,
        Policy,
        ShellError,
        ErrorLabel,
        CommandOutcome,
        ExecutionContext,
        ExecutionInput,
        ExecutionOutcome,
        OutputTarget,
        StructuredValue,
        ExtensionAction,
        ExtensionEvent,
        EventHandlerReport,
        EventSubscription,
        CommandRegistration,
        ContributionRegistration,
        PluginRegistrations,
        QuirlConfig,
        Vec<EventHandlerReport>,
        Option<ShellError>,
    );
    let choice = src.below(CHOICES.len() + 1);
    match CHOICES.get(choice) {
        Some(round_trip) => round_trip(src),
        None => {
            let Some(kind) = src.arbitrary::<OperationKind>() else {
                return;
            };
            let rest = src.rest();
            let mut unstructured = arbitrary::Unstructured::new(rest);
            let Ok(result) = OperationResult::arbitrary_for(kind, &mut unstructured) else {
                return;
            };
            let value = result
                .to_value()
                .unwrap_or_else(|error| panic!("{result:?} has no value: {error}"));
            let back = OperationResult::decode(kind, &value)
                .unwrap_or_else(|error| panic!("{kind:?}: {value} refused: {error}"));
            assert_eq!(back, result, "{value}");
        }
    }
}

// ----- target: policy and error-record validation ----------------------------

fn boundary_u64(src: &mut Source<'_>, max: u64) -> u64 {
    match src.byte() % 8 {
        0 => 0,
        1 => 1,
        2 => max,
        3 => max + 1,
        4 => max - 1,
        5 => u64::MAX,
        6 => src.raw_u64() % (max + 2),
        _ => src.raw_u64(),
    }
}

fn check_policy(src: &mut Source<'_>) {
    let allow = src.flag();
    let memory = boundary_u64(src, oracle::MEMORY_MAX);
    let instructions = boundary_u64(src, oracle::INSTRUCTIONS_MAX);
    let wall = boundary_u64(src, oracle::WALL_MAX);
    let valid = oracle::policy_ok(memory, instructions, wall);
    match Policy::new(PolicySettings {
        allow_process: allow,
        memory_limit_bytes: memory,
        instruction_limit: instructions,
        wall_time_ms: wall,
    }) {
        Ok(policy) => {
            assert!(valid, "Policy::new accepted {memory}/{instructions}/{wall}");
            assert_eq!(
                (
                    policy.allow_process(),
                    policy.memory_limit_bytes(),
                    policy.instruction_limit(),
                    policy.wall_time_ms()
                ),
                (allow, memory, instructions, wall)
            );
        }
        Err(error) => {
            assert!(
                !valid,
                "Policy::new rejected {memory}/{instructions}/{wall}"
            );
            assert_eq!(error.kind(), ErrorKind::PolicyOutOfRange);
        }
    }
    // The receiving side, from a hand-written frame.
    let descriptor = serde_json::to_string(quirl_lua_protocol::LUA_WORKER_PROTOCOL_DESCRIPTOR)
        .unwrap_or_default();
    let frame = format!(
        r#"{{"kind":"request","request":{{"version":1,"id":1,"operation":{{"operation":"initialize","protocol_descriptor":{descriptor},"policy":{{"allow_process":{allow},"memory_limit_bytes":{memory},"instruction_limit":{instructions},"wall_time_ms":{wall}}},"grants":null,"process_enabled":false}}}}}}"#
    );
    match decode_parent_frame(frame.as_bytes()) {
        Ok(ParentFrame::Request { request }) => {
            assert!(
                valid,
                "decoder accepted policy {memory}/{instructions}/{wall}"
            );
            let Operation::Initialize { policy, .. } = request.operation else {
                panic!("initialize decoded as another operation");
            };
            assert_eq!(policy.memory_limit_bytes(), memory);
            assert_eq!(policy.instruction_limit(), instructions);
            assert_eq!(policy.wall_time_ms(), wall);
            assert_eq!(policy.allow_process(), allow);
        }
        Ok(other) => panic!("initialize decoded as {other:?}"),
        Err(error) => {
            assert!(!valid, "decoder rejected valid policy: {error}");
            assert_eq!(error.kind(), ErrorKind::PolicyOutOfRange, "{error}");
        }
    }
}

/// A count biased to the 64-item boundary.
fn item_count(src: &mut Source<'_>) -> usize {
    match src.byte() % 6 {
        0 => 64,
        1 => 65,
        2 => 63,
        _ => src.below(4),
    }
}

/// A string of `len` bytes (ASCII filler with an optional multibyte tail).
fn sized_text(src: &mut Source<'_>, len: usize) -> String {
    let mut text = String::with_capacity(len);
    if len >= 4 && src.flag() {
        text.push('😀');
    }
    while text.len() < len {
        text.push('x');
    }
    text
}

/// How long the one big text of a generated error record is.
enum TextSize {
    /// A few bytes.
    Small(usize),
    /// Whatever brings the record's total to the 256 KiB bound plus this.
    AtBound(i64),
}

fn text_size(src: &mut Source<'_>) -> TextSize {
    match src.byte() % 8 {
        0 => TextSize::AtBound(0),
        1 => TextSize::AtBound(1),
        2 => TextSize::AtBound(-1),
        3 => TextSize::AtBound(-(oracle::TEXT_MAX as i64) / 2),
        _ => TextSize::Small(src.below(8)),
    }
}

fn any_label(src: &mut Source<'_>) -> ErrorLabel {
    let source = match src.byte() % 3 {
        0 => None,
        1 => Some(src.text(6)),
        _ => Some("aé😀z".to_owned()),
    };
    let len = source.as_ref().map_or(0, String::len) as u64;
    let pick = |src: &mut Source<'_>| match src.byte() % 5 {
        0 => src.u64_in(0, len + 1) as u32,
        1 => len as u32,
        2 => u32::MAX,
        _ => src.below(10) as u32,
    };
    let start = pick(src);
    let end = pick(src);
    ErrorLabel {
        source,
        start,
        end,
        message: src.text(4),
    }
}

/// An error record anywhere near or beyond its bounds.
fn bounded_error(src: &mut Source<'_>) -> ShellError {
    let mut error = ShellError::new(generate::error_code(src), String::new());
    let size = text_size(src);
    let slot = src.below(6);
    for _ in 0..item_count(src) {
        error.labels.push(any_label(src));
    }
    for _ in 0..item_count(src) {
        error.context.push(src.text(3));
    }
    for _ in 0..item_count(src) {
        error.help.push(src.text(3));
    }
    error.command = src.flag().then(|| src.text(4));
    error.exit_status = src.flag().then(|| src.any_i32());
    if slot == 1 {
        error.command = Some(String::new());
    }
    let len = match size {
        TextSize::Small(len) => len,
        TextSize::AtBound(delta) => {
            let others = oracle::text_bytes(&error) as i64;
            (oracle::TEXT_MAX as i64 - others + delta).max(0) as usize
        }
    };
    let filler = sized_text(src, len);
    match slot {
        0 => error.message = filler,
        1 => error.command = Some(filler),
        2 => error.context.push(filler),
        3 => error.help.push(filler),
        4 => error.labels.push(ErrorLabel {
            source: Some(filler),
            start: 0,
            end: 0,
            message: String::new(),
        }),
        _ => error.message.push_str(&src.text(5)),
    }
    error
}

/// An error record written by hand, in a member order of its own.
fn error_json(error: &ShellError) -> Value {
    let labels: Vec<Value> = error
        .labels
        .iter()
        .map(|label| {
            serde_json::json!({
                "message": label.message, "end": label.end,
                "start": label.start, "source": label.source,
            })
        })
        .collect();
    let code = match error.code {
        ErrorCode::InvalidCommand => "invalid_command",
        ErrorCode::InvalidArgument => "invalid_argument",
        ErrorCode::Data => "data",
        ErrorCode::Io => "io",
        ErrorCode::ProcessSpawn => "process_spawn",
        ErrorCode::ScriptRead => "script_read",
        ErrorCode::Lua => "lua",
        ErrorCode::Validation => "validation",
        ErrorCode::ResourceLimit => "resource_limit",
    };
    serde_json::json!({
        "help": error.help, "exit_status": error.exit_status, "labels": labels,
        "command": error.command, "context": error.context, "message": error.message,
        "code": code,
    })
}

fn expect_bounds<T: std::fmt::Debug>(what: &str, valid: bool, result: Result<T, ProtocolError>) {
    match result {
        Ok(_) => assert!(valid, "{what} accepted an out-of-bounds error record"),
        Err(error) => {
            assert!(!valid, "{what} rejected a valid error record: {error}");
            assert_eq!(
                error.kind(),
                ErrorKind::ErrorRecordBounds,
                "{what}: {error}"
            );
        }
    }
}

fn check_error_bounds(src: &mut Source<'_>) {
    let error = bounded_error(src);
    let valid = oracle::error_record_ok(&error);
    expect_bounds("ShellError::validate", valid, error.validate());
    let record = error_json(&error);
    // Worker → parent: the error of a response.
    let response = serde_json::json!({
        "kind": "response",
        "response": {"ok": false, "error": record, "id": 3, "version": 1, "result": null},
    });
    let bytes = serde_json::to_vec(&response).unwrap_or_default();
    expect_bounds("response decoder", valid, decode_worker_frame(&bytes));
    // Parent → worker: the error of a host response, and of an error event.
    let host = serde_json::json!({
        "kind": "host_response",
        "response": {"request_id": 3, "call_id": 1, "error": record},
    });
    let bytes = serde_json::to_vec(&host).unwrap_or_default();
    expect_bounds("host response decoder", valid, decode_parent_frame(&bytes));
    let event = serde_json::json!({
        "kind": "request",
        "request": {"version": 1, "id": 4, "operation": {"operation": "event", "event": {
            "protocol_version": 2, "sequence": 1, "data": {"kind": "error", "error": record},
        }}},
    });
    let bytes = serde_json::to_vec(&event).unwrap_or_default();
    expect_bounds("event decoder", valid, decode_parent_frame(&bytes));
    // Senders refuse too.
    let frame = WorkerFrame::Response {
        response: Response::failure(3, error.clone()),
    };
    expect_bounds("response encoder", valid, encode_worker_frame(&frame));
    let frame = ParentFrame::HostResponse {
        response: HostResponse {
            request_id: 3,
            call_id: 1,
            result: Err(error),
        },
    };
    expect_bounds("host response encoder", valid, encode_parent_frame(&frame));
}

/// Target `validation`: policy ranges and error-record bounds, decided by the
/// crate (constructor, decoder at both boundaries, encoder) exactly as an
/// independent oracle decides them.
pub fn validation(data: &[u8]) {
    let mut src = Source::new(data);
    if src.flag() {
        check_policy(&mut src);
    } else {
        check_error_bounds(&mut src);
    }
}

// ----- strictness: mutations of valid frames ----------------------------------

/// Which direction a frame travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Parent → worker.
    Parent,
    /// Worker → parent.
    Worker,
}

/// The role of an object inside a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A record or tagged variant (fixed members); `tag` names its tag member.
    Record {
        /// The ctx the object was found in.
        ctx: Ctx,
        /// Its tag member, if it is a tagged union.
        tag: Option<&'static str>,
    },
    /// A map with free keys and typed values (order kept when `ordered`).
    Map {
        /// Whether member order is meaningful (structured-value records).
        ordered: bool,
    },
    /// Inside a free-form JSON value.
    FreeForm,
}

/// What kind of value sits at a position of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Ctx {
    ParentFrame,
    WorkerFrame,
    Request,
    Operation,
    Policy,
    ExecContext,
    Environment,
    Input,
    SValue,
    SValueRecord,
    SValueWrapper,
    OutputTarget,
    Effects,
    Event,
    EventData,
    ShellError,
    Label,
    HostResponse,
    Outcome,
    Response,
    HostCall,
    FreeForm,
    Scalar,
}

fn tag_value<'a>(entries: &'a [(String, Json)], tag: &str) -> Option<&'a str> {
    entries.iter().find_map(|(key, value)| match value {
        Json::Str(raw) if Json::plain_key(key) == tag => Some(Json::plain_key(raw)),
        _ => None,
    })
}

fn tag_of(ctx: Ctx) -> Option<&'static str> {
    match ctx {
        Ctx::ParentFrame | Ctx::WorkerFrame | Ctx::Input | Ctx::OutputTarget | Ctx::EventData => {
            Some("kind")
        }
        Ctx::Operation => Some("operation"),
        Ctx::SValue => Some("type"),
        _ => None,
    }
}

fn child_ctx(ctx: Ctx, entries: &[(String, Json)], key: &str) -> Ctx {
    match (ctx, key) {
        (Ctx::FreeForm, _) => Ctx::FreeForm,
        (Ctx::ParentFrame, "request") => Ctx::Request,
        (Ctx::ParentFrame, "response") => Ctx::HostResponse,
        (Ctx::WorkerFrame, "response") => Ctx::Response,
        (Ctx::WorkerFrame, "call") => Ctx::HostCall,
        (Ctx::Request, "operation") => Ctx::Operation,
        (Ctx::Operation, "policy") => Ctx::Policy,
        (Ctx::Operation, "context") => match tag_value(entries, "operation") {
            Some("run" | "plugin_command") => Ctx::ExecContext,
            _ => Ctx::FreeForm,
        },
        (Ctx::Operation, "event") => Ctx::Event,
        (Ctx::ExecContext, "environment") => Ctx::Environment,
        (Ctx::ExecContext, "input") => Ctx::Input,
        (Ctx::ExecContext, "output") => Ctx::OutputTarget,
        (Ctx::ExecContext, "declared_effects") => Ctx::Effects,
        (Ctx::Input, "content") => match tag_value(entries, "kind") {
            Some("value") => Ctx::SValue,
            _ => Ctx::Scalar,
        },
        (Ctx::SValue, "value") => match tag_value(entries, "type") {
            Some("record") => Ctx::SValueRecord,
            Some("list") => Ctx::SValue,
            Some("duration" | "size") => Ctx::SValueWrapper,
            _ => Ctx::Scalar,
        },
        (Ctx::SValueRecord, _) => Ctx::SValue,
        (Ctx::Event, "data") => Ctx::EventData,
        (Ctx::EventData, "error") | (Ctx::HostResponse, "error") | (Ctx::Response, "error") => {
            Ctx::ShellError
        }
        (Ctx::ShellError, "labels") => Ctx::Label,
        (Ctx::HostResponse, "outcome") => Ctx::Outcome,
        (Ctx::Response, "result") => Ctx::FreeForm,
        _ => Ctx::Scalar,
    }
}

fn role_of(ctx: Ctx) -> Role {
    match ctx {
        Ctx::FreeForm => Role::FreeForm,
        Ctx::Environment => Role::Map { ordered: false },
        Ctx::SValueRecord => Role::Map { ordered: true },
        other => Role::Record {
            ctx: other,
            tag: tag_of(other),
        },
    }
}

/// Roles of every object of `tree`, in pre-order (stored member order).
pub fn object_roles(tree: &Json, direction: Direction) -> Vec<Role> {
    fn walk(json: &Json, ctx: Ctx, out: &mut Vec<Role>) {
        match json {
            Json::Obj(entries) => {
                out.push(role_of(ctx));
                for (key, value) in entries {
                    walk(value, child_ctx(ctx, entries, Json::plain_key(key)), out);
                }
            }
            Json::Arr(items) => {
                for item in items {
                    walk(item, ctx, out);
                }
            }
            Json::Atom(_) | Json::Str(_) => {}
        }
    }
    let mut out = Vec::new();
    let root = match direction {
        Direction::Parent => Ctx::ParentFrame,
        Direction::Worker => Ctx::WorkerFrame,
    };
    walk(tree, root, &mut out);
    out
}

/// Objects of `tree` in pre-order (the order of [`object_roles`]).
fn objects_preorder(tree: &Json) -> Vec<&[(String, Json)]> {
    fn walk<'a>(json: &'a Json, out: &mut Vec<&'a [(String, Json)]>) {
        match json {
            Json::Obj(entries) => {
                out.push(entries);
                for (_, value) in entries {
                    walk(value, out);
                }
            }
            Json::Arr(items) => items.iter().for_each(|item| walk(item, out)),
            Json::Atom(_) | Json::Str(_) => {}
        }
    }
    let mut out = Vec::new();
    walk(tree, &mut out);
    out
}

/// Canonical form: free-form objects and the environment map have their
/// keys sorted by UTF-8 bytes, as Quirl's `serde_json::Value` writes them.
fn assert_free_form_keys_sorted(tree: &Json, direction: Direction, text: &str) {
    let roles = object_roles(tree, direction);
    for (entries, role) in objects_preorder(tree).into_iter().zip(roles) {
        if !matches!(role, Role::FreeForm | Role::Map { ordered: false }) {
            continue;
        }
        let keys: Vec<String> = entries
            .iter()
            .map(|(raw, _)| serde_json::from_str::<String>(raw).unwrap_or_default())
            .collect();
        assert!(
            keys.windows(2)
                .all(|pair| pair[0].as_bytes() < pair[1].as_bytes()),
            "free-form keys not sorted in the canonical encoding: {keys:?}\n{text}"
        );
    }
}

fn keep_order(tree: &Json, direction: Direction) -> Vec<bool> {
    object_roles(tree, direction)
        .into_iter()
        .map(|role| role == Role::Map { ordered: true })
        .collect()
}

/// Write `json` with shuffled member order (except where `keep` says) and
/// random whitespace between tokens; `next` is the pre-order object id.
fn write_shuffled(
    json: &Json,
    src: &mut Source<'_>,
    keep: &[bool],
    next: &mut usize,
    out: &mut String,
) {
    fn ws(src: &mut Source<'_>, out: &mut String) {
        const WS: [&str; 8] = ["", "", "", " ", "\n", "\t", "\r\n", "  "];
        out.push_str(WS[src.below(WS.len())]);
    }
    match json {
        Json::Atom(raw) | Json::Str(raw) => out.push_str(raw),
        Json::Arr(items) => {
            out.push('[');
            ws(src, out);
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                    ws(src, out);
                }
                write_shuffled(item, src, keep, next, out);
                ws(src, out);
            }
            out.push(']');
        }
        Json::Obj(entries) => {
            let id = *next;
            *next += 1;
            // Pre-order ids of each member's subtree, in stored order.
            let mut bases = Vec::with_capacity(entries.len());
            let mut base = *next;
            for (_, value) in entries {
                bases.push(base);
                base += count_objects(value);
            }
            *next = base;
            let mut order: Vec<usize> = (0..entries.len()).collect();
            if !keep.get(id).copied().unwrap_or(false) {
                for index in (1..order.len()).rev() {
                    let other = src.below(index + 1);
                    order.swap(index, other);
                }
            }
            out.push('{');
            ws(src, out);
            for (position, index) in order.into_iter().enumerate() {
                let (key, value) = &entries[index];
                if position > 0 {
                    out.push(',');
                    ws(src, out);
                }
                out.push_str(key);
                ws(src, out);
                out.push(':');
                ws(src, out);
                let mut member_next = bases[index];
                write_shuffled(value, src, keep, &mut member_next, out);
                ws(src, out);
            }
            out.push('}');
        }
    }
}

fn count_objects(json: &Json) -> usize {
    match json {
        Json::Obj(entries) => 1 + entries.iter().map(|(_, v)| count_objects(v)).sum::<usize>(),
        Json::Arr(items) => items.iter().map(count_objects).sum(),
        Json::Atom(_) | Json::Str(_) => 0,
    }
}

/// The object with pre-order id `target`.
fn object_mut(json: &mut Json, target: usize) -> Option<&mut Json> {
    fn find<'a>(json: &'a mut Json, target: usize, next: &mut usize) -> Option<&'a mut Json> {
        match json {
            Json::Obj(_) => {
                if *next == target {
                    return Some(json);
                }
                *next += 1;
                let Json::Obj(entries) = json else {
                    return None;
                };
                for (_, value) in entries.iter_mut() {
                    if let Some(found) = find(value, target, next) {
                        return Some(found);
                    }
                }
                None
            }
            Json::Arr(items) => {
                for item in items.iter_mut() {
                    if let Some(found) = find(item, target, next) {
                        return Some(found);
                    }
                }
                None
            }
            Json::Atom(_) | Json::Str(_) => None,
        }
    }
    find(json, target, &mut 0)
}

/// Escape the first character of a raw key token as `\uXXXX` (same key).
fn escape_first(raw: &str) -> String {
    let inner = Json::plain_key(raw);
    let mut chars = inner.chars();
    match chars.next() {
        Some(first) if first != '\\' && (first as u32) < 0x10000 => {
            format!("\"\\u{:04x}{}\"", first as u32, chars.as_str())
        }
        _ => raw.to_owned(),
    }
}

/// What a mutation must lead to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Accept,
    Reject(ErrorKind),
}

fn check_mutation<F: WireFrame + PartialEq + std::fmt::Debug>(
    text: &str,
    expect: Expect,
    what: &str,
) {
    let result = F::decode(text.as_bytes());
    match (expect, result) {
        (Expect::Accept, Ok(_)) => {}
        (Expect::Reject(kind), Err(error)) => {
            assert_eq!(error.kind(), kind, "{what}: {error}\n{text}");
        }
        (expected, Ok(frame)) => {
            panic!("{what}: expected {expected:?}, accepted\n{text}\n{frame:?}")
        }
        (expected, Err(error)) => panic!("{what}: expected {expected:?}, got {error}\n{text}"),
    }
}

/// Expected result of removing member `key` from a record of `ctx`.
fn removal_expectation(ctx: Ctx, key: &str) -> Expect {
    match (ctx, key) {
        (Ctx::EventData, "text") => Expect::Accept,
        (Ctx::Response, "error") => Expect::Reject(ErrorKind::InconsistentResponse),
        (Ctx::HostResponse, "outcome" | "error") => {
            Expect::Reject(ErrorKind::InconsistentHostResponse)
        }
        _ => Expect::Reject(ErrorKind::MissingField),
    }
}

fn strictness_one<F: WireFrame + PartialEq + std::fmt::Debug>(
    frame: &F,
    src: &mut Source<'_>,
    direction: Direction,
    mutation: Mutation,
) {
    let Ok(bytes) = frame.encode() else {
        panic!("a valid frame failed to encode: {frame:?}");
    };
    let text = String::from_utf8(bytes).unwrap_or_default();
    let Some(tree) = Json::parse(&text) else {
        panic!("tree parser failed on {text}");
    };
    let roles = object_roles(&tree, direction);
    let pick = src.below(roles.len());
    let role = roles[pick];
    let mut mutated = tree.clone();
    let Some(Json::Obj(entries)) = object_mut(&mut mutated, pick) else {
        panic!("object {pick} not found");
    };
    let mut out = String::new();
    match mutation {
        Mutation::UnknownMember => {
            // An unknown member: a reject in records, fine in free-form values.
            const NAMES: [&str; 6] = [
                "\"zz_unknown\"",
                "\"\"",
                "\"Kind\"",
                "\"version \"",
                "\"\\u0000\"",
                "\"__proto__\"",
            ];
            const VALUES: [&str; 5] = ["null", "0", "{}", "[]", "\"x\""];
            let name = NAMES[src.below(NAMES.len())];
            let value = VALUES[src.below(VALUES.len())];
            if entries.iter().any(|(key, _)| key == name) {
                return;
            }
            let at = src.below(entries.len() + 1);
            entries.insert(at, (name.to_owned(), Json::Atom(value.to_owned())));
            mutated.write(&mut out);
            let expect = match role {
                Role::Record { .. } => Expect::Reject(ErrorKind::UnknownField),
                Role::FreeForm => Expect::Accept,
                Role::Map { .. } => return,
            };
            check_mutation::<F>(&out, expect, "unknown member");
        }
        Mutation::DuplicateKey => {
            // A repeated key, anywhere, possibly spelled with an escape.
            if entries.is_empty() {
                return;
            }
            let from = src.below(entries.len());
            let (mut key, value) = entries[from].clone();
            if src.flag() {
                key = escape_first(&key);
            }
            let at = src.below(entries.len() + 1);
            entries.insert(at, (key, value));
            mutated.write(&mut out);
            check_mutation::<F>(
                &out,
                Expect::Reject(ErrorKind::DuplicateKey),
                "duplicate key",
            );
        }
        Mutation::Trailing => {
            // Trailing whitespace or bytes after the value.
            const TAILS: [&str; 8] = [" ", "\n", "\t", "\r\n", "  ", "0", "{}", "\u{0}"];
            let tail: String = (0..=src.below(3))
                .map(|_| TAILS[src.below(TAILS.len())])
                .collect();
            check_mutation::<F>(
                &format!("{text}{tail}"),
                Expect::Reject(ErrorKind::TrailingBytes),
                "trailing bytes",
            );
        }
        Mutation::Leading => {
            const HEADS: [&str; 4] = [" ", "\n", "\t", "\r"];
            let head = HEADS[src.below(HEADS.len())];
            check_mutation::<F>(
                &format!("{head}{text}"),
                Expect::Reject(ErrorKind::MalformedJson),
                "leading whitespace",
            );
        }
        Mutation::RecordAsArray => {
            // A record sent as an array of its member values.
            let Role::Record { .. } = role else {
                return;
            };
            let values: Vec<Json> = entries.iter().map(|(_, value)| value.clone()).collect();
            if let Some(object) = object_mut(&mut mutated, pick) {
                *object = Json::Arr(values);
            }
            mutated.write(&mut out);
            check_mutation::<F>(
                &out,
                Expect::Reject(ErrorKind::NotAnObject),
                "record as array",
            );
        }
        Mutation::Tag => {
            // An unknown tag value, or no tag at all.
            let Role::Record { tag: Some(tag), .. } = role else {
                return;
            };
            let Some(index) = entries
                .iter()
                .position(|(key, _)| Json::plain_key(key) == tag)
            else {
                panic!("tagged object without its tag: {text}");
            };
            let expect = if src.flag() {
                entries[index].1 = Json::Str("\"no_such_variant\"".to_owned());
                ErrorKind::UnknownVariant
            } else {
                entries.remove(index);
                ErrorKind::MissingTag
            };
            mutated.write(&mut out);
            check_mutation::<F>(&out, Expect::Reject(expect), "tag");
        }
        Mutation::MissingMember => {
            // A required member removed.
            let Role::Record { ctx, tag } = role else {
                return;
            };
            let members: Vec<usize> = (0..entries.len())
                .filter(|&index| Some(Json::plain_key(&entries[index].0)) != tag)
                .collect();
            if members.is_empty() {
                return;
            }
            let index = members[src.below(members.len())];
            let (key, _) = entries.remove(index);
            let expect = removal_expectation(ctx, Json::plain_key(&key));
            mutated.write(&mut out);
            check_mutation::<F>(&out, expect, "member removed");
        }
        Mutation::Truncate => {
            // Cut short anywhere: always a reject.
            let cut = src.below(text.len());
            let bytes = &text.as_bytes()[..cut];
            assert!(
                F::decode(bytes).is_err(),
                "a truncated payload was accepted"
            );
        }
        Mutation::Relayout => {
            // Whitespace between tokens and member order are free.
            let keep = keep_order(&tree, direction);
            write_shuffled(&tree, src, &keep, &mut 0, &mut out);
            match F::decode(out.as_bytes()) {
                Ok(decoded) => assert_eq!(&decoded, frame, "layout changed the frame\n{out}"),
                Err(error) => panic!("layout change rejected: {error}\n{out}"),
            }
        }
    }
}

/// One mutation of a valid frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// Insert a member the record does not declare (`unknown_field`).
    UnknownMember,
    /// Repeat a key, possibly escaped differently (`duplicate_key`).
    DuplicateKey,
    /// Whitespace or bytes after the value (`trailing_bytes`).
    Trailing,
    /// Whitespace before the value (`malformed_json`).
    Leading,
    /// A record as an array of its values (`not_an_object`).
    RecordAsArray,
    /// An unknown tag value or no tag (`unknown_variant` / `missing_tag`).
    Tag,
    /// A required member removed (`missing_field`, or the consistency kinds).
    MissingMember,
    /// The payload cut short (some reject).
    Truncate,
    /// Member order and inter-token whitespace changed (accepted, same frame).
    Relayout,
}

impl Mutation {
    /// Every mutation.
    pub const ALL: [Mutation; 9] = [
        Mutation::UnknownMember,
        Mutation::DuplicateKey,
        Mutation::Trailing,
        Mutation::Leading,
        Mutation::RecordAsArray,
        Mutation::Tag,
        Mutation::MissingMember,
        Mutation::Truncate,
        Mutation::Relayout,
    ];
}

/// Apply `mutation` to the valid frame generated from `data`.
pub fn strictness_case(data: &[u8], mutation: Mutation) {
    let mut src = Source::new(data);
    if src.flag() {
        let frame = generate::parent_frame(&mut src);
        strictness_one(&frame, &mut src, Direction::Parent, mutation);
    } else {
        let frame = generate::worker_frame(&mut src);
        strictness_one(&frame, &mut src, Direction::Worker, mutation);
    }
}

/// Target `strictness`: a valid frame with one mutation (unknown member,
/// repeated key, trailing/leading bytes, record as array, bad or missing
/// tag, missing member, truncation, re-layout) is rejected with the right
/// sub-kind, or accepted where the mutation is legal. The first byte
/// chooses the mutation.
pub fn strictness(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    strictness_case(
        rest,
        Mutation::ALL[usize::from(first) % Mutation::ALL.len()],
    );
}
