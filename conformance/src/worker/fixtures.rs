//! Worker cases derived from the golden fixtures (`fixtures/manifest.json`).
//!
//! - `rejects_fixture.NAME`: every `parent_to_worker` reject stream, sent
//!   after a valid `initialize` (id 0, so that the fixtures' own ids stay
//!   valid): the frames the manifest says decode first are answered, then
//!   the worker must end the session — no frame, nonzero exit (§13.1).
//! - `rejects_fixture_before_initialize.NAME`: the framing rejects and the
//!   ones about `initialize` itself, sent as the first bytes of a session.
//! - `accepts_fixture.NAME`: every single-request `parent_to_worker`
//!   accept stream is answered with a response of its id, and the worker
//!   then ends cleanly at end of input (exit 0).
//! - `rejects_unsolicited_host_response.NAME`: the valid host responses,
//!   sent while no host call is pending (`unexpected_frame`, §9.3).
//! - `rejects_worker_frame.NAME`: every valid `worker_to_parent` frame,
//!   sent to the worker (`unknown_variant`, §6.3).

use super::script::{CaseData, ExitStep, Expect, InitStep, PolicyData, Step, ViolationStep};
use crate::embedded::Fixtures;
use quirl_lua_protocol::decode_parent_frame;
use quirl_lua_protocol::records::{OperationKind, ParentFrame};
use serde::Deserialize;

/// One manifest entry (unknown members ignored, as the README asks).
#[derive(Debug, Clone, Deserialize)]
pub struct Entry {
    /// Path relative to the fixtures directory.
    pub file: String,
    /// `parent_to_worker` or `worker_to_parent`.
    pub direction: String,
    /// `accept` or `reject`.
    pub expect: String,
    /// Reject sub-kind.
    #[serde(default)]
    pub code: Option<String>,
    /// Frames in the stream (accept) or decoding before the error (reject).
    pub frames: usize,
    /// For people.
    #[serde(default)]
    pub note: String,
}

/// The section of SPEC.md that defines a sub-kind.
pub fn section_of(code: &str) -> &'static str {
    match code {
        "empty_frame" | "oversized_frame" | "truncated_header" | "truncated_frame" => "§4.3",
        "invalid_utf8" | "byte_order_mark" | "malformed_json" => "§5.1",
        "trailing_bytes" => "§5.2",
        "duplicate_key" => "§5.3",
        "depth_exceeded" => "§5.4",
        "not_an_object" => "§5.5",
        "integer_out_of_range" => "§5.6",
        "wrong_type" | "unknown_field" | "missing_field" | "unknown_variant" | "missing_tag" => {
            "§5.9"
        }
        "bad_version" => "§8.1",
        "descriptor_mismatch" => "§8.2",
        "policy_out_of_range" => "§10",
        "error_record_bounds" => "§6.9",
        "inconsistent_host_response" => "§6.7",
        "domain_bounds" => "§6, §7",
        _ => "§13.1",
    }
}

/// Split a stream into its first `count` complete frames (bytes with
/// header) and the rest.
fn split_frames(bytes: &[u8], count: usize) -> Option<(Vec<Vec<u8>>, Vec<u8>)> {
    let mut frames = Vec::new();
    let mut offset = 0;
    for _ in 0..count {
        let header: [u8; 4] = bytes.get(offset..offset + 4)?.try_into().ok()?;
        let length = usize::try_from(u32::from_be_bytes(header)).ok()?;
        let end = offset + 4 + length;
        frames.push(bytes.get(offset..end)?.to_vec());
        offset = end;
    }
    Some((frames, bytes.get(offset..)?.to_vec()))
}

/// The id and operation of a framed request.
fn request_of(frame: &[u8]) -> Option<(u64, OperationKind)> {
    match decode_parent_frame(frame.get(4..)?).ok()? {
        ParentFrame::Request { request } => Some((request.id, request.operation.kind())),
        ParentFrame::HostResponse { .. } => None,
    }
}

fn stem(file: &str) -> String {
    let name = file.rsplit('/').next().unwrap_or(file);
    name.strip_suffix(".bin").unwrap_or(name).to_owned()
}

fn case(name: String, spec: &str, must: String, steps: Vec<Step>) -> CaseData {
    CaseData {
        name,
        spec: spec.to_owned(),
        must,
        tags: vec!["fixture".to_owned()],
        profile: None,
        lua_free: None,
        policy: PolicyData::default(),
        grants: None,
        process_enabled: None,
        setup: Vec::new(),
        source: None,
        operation: None,
        host: Vec::new(),
        expect: None,
        steps: Some(steps),
    }
}

fn init_zero() -> Step {
    Step::Init(InitStep {
        id: Some(0),
        ..InitStep::default()
    })
}

fn is_truncation(code: &str) -> bool {
    matches!(code, "truncated_header" | "truncated_frame")
}

/// Whether a reject is also sent before `initialize`: framing, and
/// everything about `initialize` itself.
fn before_initialize(entry: &Entry, name: &str, bytes: &[u8]) -> bool {
    let code = entry.code.as_deref().unwrap_or_default();
    entry.frames == 0
        && (section_of(code) == "§4.3"
            || matches!(
                code,
                "bad_version" | "descriptor_mismatch" | "policy_out_of_range"
            )
            || name.contains("initialize")
            || contains(bytes, br#""operation":"initialize""#))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// Read the manifest and build every fixture case.
pub fn cases(fixtures: &Fixtures) -> Result<Vec<CaseData>, String> {
    let text = fixtures.manifest()?;
    let entries: Vec<Entry> = serde_json::from_str(&text)
        .map_err(|error| format!("manifest.json ({}): {error}", fixtures.describe()))?;
    let mut out = Vec::new();
    let mut before = Vec::new();
    let mut accepts = Vec::new();
    let mut reversed = Vec::new();
    for entry in &entries {
        let bytes = fixtures.read(&entry.file)?;
        let name = stem(&entry.file);
        let code = entry.code.clone().unwrap_or_default();
        match (entry.direction.as_str(), entry.expect.as_str()) {
            ("parent_to_worker", "reject") => {
                let (rejects, first_bytes) = reject_cases(entry, &name, &code, &bytes)?;
                out.push(rejects);
                before.extend(first_bytes);
            }
            ("parent_to_worker", "accept") => accepts.extend(accept_case(entry, &name, &bytes)),
            ("worker_to_parent", "accept") => reversed.push(reversed_case(entry, &name, &bytes)),
            _ => {}
        }
    }
    out.extend(before);
    out.extend(accepts);
    out.extend(reversed);
    Ok(out)
}

/// The cases of a fixture the worker must reject: after a valid
/// `initialize` (and the fixture's leading requests), and, where the fixture
/// makes sense as a session's first bytes, before any `initialize`.
fn reject_cases(
    entry: &Entry,
    name: &str,
    code: &str,
    bytes: &[u8],
) -> Result<(CaseData, Option<CaseData>), String> {
    let spec = section_of(code);
    let must = format!(
        "A worker MUST reject {name} ({code}: {}) and end the session without a frame and with a nonzero exit (§13.1)",
        entry.note
    );
    let (frames, rest) = split_frames(bytes, entry.frames)
        .ok_or_else(|| format!("{}: fewer frames than the manifest says", entry.file))?;
    let mut steps = vec![init_zero()];
    for frame in frames {
        let (id, kind) = request_of(&frame)
            .ok_or_else(|| format!("{}: a leading frame is not a request", entry.file))?;
        steps.push(Step::SendRequestRaw(frame, id, kind));
        steps.push(Step::ExpectResponse(Expect {
            any_answer: true,
            ..Expect::default()
        }));
    }
    steps.push(Step::SendRaw(rest.clone()));
    if is_truncation(code) {
        steps.push(Step::Close(true));
    }
    steps.push(Step::ExpectViolation(ViolationStep::default()));
    let rejects = case(format!("rejects_fixture.{name}"), spec, must, steps);
    let first_bytes = before_initialize(entry, name, bytes).then(|| {
        let mut steps = vec![Step::SendRaw(bytes.to_vec())];
        if is_truncation(code) {
            steps.push(Step::Close(true));
        }
        steps.push(Step::ExpectViolation(ViolationStep::default()));
        case(
            format!("rejects_fixture_before_initialize.{name}"),
            spec,
            format!(
                "A worker MUST reject {name} ({code}) as the first bytes of a session, build no VM and exit nonzero (§13.1, §15)"
            ),
            steps,
        )
    });
    Ok((rejects, first_bytes))
}

/// The case of a fixture the worker must accept (an end of input, an
/// `initialize` or another request), or must refuse as unsolicited (a host
/// response); none for fixtures of several frames.
fn accept_case(entry: &Entry, name: &str, bytes: &[u8]) -> Option<CaseData> {
    if entry.frames == 0 {
        return Some(case(
            format!("accepts_fixture.{name}"),
            "§3.3",
            "End of input before any frame is a clean end: the worker exits 0 (§3.3, §9.5)"
                .to_owned(),
            vec![Step::Close(true), Step::ExpectExit(ExitStep::default())],
        ));
    }
    if entry.frames != 1 {
        return None;
    }
    Some(match request_of(bytes) {
        Some((id, OperationKind::Initialize)) => case(
            format!("accepts_fixture.{name}"),
            "§7.1, §9.3",
            format!(
                "A worker MUST answer the valid initialize {name} ({}) with a response of its id, and exit 0 at end of input (§9.5)",
                entry.note
            ),
            vec![
                Step::SendRequestRaw(bytes.to_vec(), id, OperationKind::Initialize),
                Step::ExpectResponse(Expect {
                    any_answer: true,
                    ..Expect::default()
                }),
                Step::Close(true),
                Step::ExpectExit(ExitStep::default()),
            ],
        ),
        Some((id, kind)) => case(
            format!("accepts_fixture.{name}"),
            "§6, §7.1",
            format!(
                "A worker MUST accept the valid request {name} ({}) and answer it with a response of its id (§9.1)",
                entry.note
            ),
            vec![
                init_zero(),
                Step::SendRequestRaw(bytes.to_vec(), id, kind),
                Step::ExpectResponse(Expect {
                    any_answer: true,
                    ..Expect::default()
                }),
                Step::Close(true),
                Step::ExpectExit(ExitStep::default()),
            ],
        ),
        None => case(
            format!("rejects_unsolicited_host_response.{name}"),
            "§9.3",
            format!(
                "A host response while no host call is pending is unexpected_frame: the worker MUST end the session ({})",
                entry.note
            ),
            vec![
                init_zero(),
                Step::SendRaw(bytes.to_vec()),
                Step::ExpectViolation(ViolationStep::default()),
            ],
        ),
    })
}

/// The case of a valid frame of the worker's own direction, sent to the worker.
fn reversed_case(entry: &Entry, name: &str, bytes: &[u8]) -> CaseData {
    case(
        format!("rejects_worker_frame.{name}"),
        "§6.3",
        format!(
            "A frame of the worker's own direction sent to the worker is unknown_variant: it MUST end the session ({})",
            entry.note
        ),
        vec![
            init_zero(),
            Step::SendRaw(bytes.to_vec()),
            Step::ExpectViolation(ViolationStep::default()),
        ],
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn splits_leading_frames_from_the_rest() {
        let bytes = [0, 0, 0, 2, b'{', b'}', 0, 0];
        let (frames, rest) = split_frames(&bytes, 1).unwrap();
        assert_eq!(frames, vec![vec![0, 0, 0, 2, b'{', b'}']]);
        assert_eq!(rest, vec![0, 0]);
        assert!(split_frames(&bytes[..5], 1).is_none());
    }

    #[test]
    fn every_sub_kind_has_a_section() {
        assert_eq!(section_of("oversized_frame"), "§4.3");
        assert_eq!(section_of("unknown_field"), "§5.9");
        assert_eq!(section_of("policy_out_of_range"), "§10");
    }

    #[test]
    fn the_repository_fixtures_make_cases() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
        let from_dir = cases(&Fixtures::Dir(dir)).unwrap();
        let cases = cases(&Fixtures::Embedded).unwrap();
        assert_eq!(from_dir.len(), cases.len());
        assert!(cases.len() > 400, "{}", cases.len());
        let names: std::collections::BTreeSet<&str> =
            cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names.len(), cases.len(), "names are unique");
        assert!(names.contains("rejects_fixture.frame_length_zero"));
        assert!(names.contains("rejects_fixture_before_initialize.version_2_request"));
        assert!(names.contains("accepts_fixture.eval_simple"));
        assert!(names.contains("rejects_worker_frame.quirl_response_fixture_v1"));
    }
}
