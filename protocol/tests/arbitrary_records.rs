//! The `arbitrary` feature: every record built by `arbitrary::Arbitrary`
//! from random bytes is within the protocol's bounds — it encodes, and the
//! strict wire decoder gives back an equal record (SPEC §5–§7, §12.2): the
//! frames through the codec (canonical, so encoding again gives the same
//! bytes), every other record through serde and `StrictDecode::from_wire_slice`,
//! and each operation's result through `OperationResult::decode` for that
//! operation.
#![cfg(feature = "arbitrary")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use arbitrary::{Arbitrary, Unstructured};
use proptest::prelude::*;
use quirl_lua_protocol::records::*;
use quirl_lua_protocol::{
    decode_parent_frame, decode_worker_frame, encode_parent_frame, encode_worker_frame,
};
use std::fmt::Debug;

/// Build a `T` from `bytes` and require the round trip through serde and
/// the wire decoder. `Ok(false)` when the bytes ran out before a value.
fn round_trips<'a, T>(bytes: &'a [u8]) -> Result<(), String>
where
    T: Arbitrary<'a> + StrictDecode + serde::Serialize + PartialEq + Debug,
{
    let mut u = Unstructured::new(bytes);
    let Ok(value) = T::arbitrary(&mut u) else {
        return Ok(());
    };
    let text = serde_json::to_vec(&value).map_err(|e| format!("{value:?}: {e}"))?;
    match T::from_wire_slice(&text) {
        Ok(back) if back == value => Ok(()),
        other => Err(format!(
            "{}: {value:?} -> {} -> {other:?}",
            std::any::type_name::<T>(),
            String::from_utf8_lossy(&text)
        )),
    }
}

macro_rules! every_record {
    ($bytes:expr, $($ty:ty),* $(,)?) => {{
        let mut failures = Vec::new();
        $( if let Err(failure) = round_trips::<$ty>($bytes) { failures.push(failure); } )*
        failures
    }};
}

fn frames(bytes: &[u8]) -> Result<(), String> {
    let mut u = Unstructured::new(bytes);
    if let Ok(frame) = ParentFrame::arbitrary(&mut u) {
        let payload = encode_parent_frame(&frame).map_err(|e| format!("{frame:?}: {e}"))?;
        let back = decode_parent_frame(&payload).map_err(|e| format!("{frame:?}: {e}"))?;
        if back != frame || encode_parent_frame(&back).ok().as_ref() != Some(&payload) {
            return Err(format!("{frame:?} came back as {back:?}"));
        }
    }
    if let Ok(frame) = WorkerFrame::arbitrary(&mut u) {
        let payload = encode_worker_frame(&frame).map_err(|e| format!("{frame:?}: {e}"))?;
        let back = decode_worker_frame(&payload).map_err(|e| format!("{frame:?}: {e}"))?;
        if back != frame || encode_worker_frame(&back).ok().as_ref() != Some(&payload) {
            return Err(format!("{frame:?} came back as {back:?}"));
        }
    }
    Ok(())
}

fn results(bytes: &[u8]) -> Result<(), String> {
    let mut u = Unstructured::new(bytes);
    for kind in OperationKind::ALL {
        let Ok(result) = OperationResult::arbitrary_for(kind, &mut u) else {
            return Ok(());
        };
        assert!(result.fits(kind), "{result:?} for {kind:?}");
        let value = result.to_value().map_err(|e| format!("{result:?}: {e}"))?;
        match OperationResult::decode(kind, &value) {
            Ok(back) if back == result => {}
            other => return Err(format!("{kind:?}: {result:?} -> {value} -> {other:?}")),
        }
    }
    Ok(())
}

fn check(bytes: &[u8]) {
    let mut failures = every_record!(
        bytes,
        ParentFrame,
        WorkerFrame,
        Request,
        Response,
        Operation,
        HostCall,
        HostResponse,
        Policy,
        ShellError,
        CheckReport,
        CheckDiagnostic,
        Severity,
        ErrorLabel,
        ErrorCode,
        CommandOutcome,
        ExecutionContext,
        ExecutionEffects,
        ExecutionInput,
        ExecutionOutcome,
        ExecutionOutput,
        ExecutionStatus,
        OutputTarget,
        StructuredValue,
        CleanupState,
        ExtensionAction,
        ExtensionEvent,
        ExtensionEventData,
        EventHandlerReport,
        EventKind,
        OutputStream,
        EventSubscription,
        CommandRegistration,
        CompletionRegistration,
        ContributionRegistration,
        PromptRegistration,
        PluginRegistrations,
        ContributionKind,
        ExtensionCapability,
        QuirlConfig,
        EditorConfig,
        PickerConfig,
        PromptConfig,
        UiConfig,
        ThemeColors,
        StatuslineConfig,
        CompletionConfig,
        Vec<EventHandlerReport>,
        Option<ShellError>,
    );
    failures.extend(frames(bytes).err());
    failures.extend(results(bytes).err());
    assert!(failures.is_empty(), "{}", failures[0]);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Every arbitrary record encodes and decodes back equal.
    #[test]
    fn every_arbitrary_record_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        check(&bytes);
    }
}

/// The generated values are not all trivial: over fixed seeds, frames of
/// every kind and non-empty lists come out.
#[test]
fn arbitrary_frames_cover_every_kind() {
    let mut kinds = std::collections::BTreeSet::new();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..2_000 {
        let bytes: Vec<u8> = (0..256)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()[0]
            })
            .collect();
        let mut u = Unstructured::new(&bytes);
        match ParentFrame::arbitrary(&mut u) {
            Ok(ParentFrame::Request { request }) => {
                kinds.insert(request.operation.kind().as_str().to_owned());
            }
            Ok(ParentFrame::HostResponse { .. }) => {
                kinds.insert("host_response".to_owned());
            }
            Err(_) => {}
        }
    }
    assert_eq!(kinds.len(), 13, "{kinds:?}");
}
