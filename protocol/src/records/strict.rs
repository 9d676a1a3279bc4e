//! Decoding any record from a host's own JSON (text, bytes or a
//! [`serde_json::Value`]) by the wire decoder's rules, with the one
//! difference a host's serde needs: members it skips when empty may be
//! absent; and decoding any record from wire bytes exactly as a frame's
//! payload is decoded (SPEC §5).
//!
//! A host with its own types goes from them to a record and back with
//! serde alone: `serde_json::to_value(&mine)` then
//! [`StrictDecode::from_json_value`], and `serde_json::to_value(&record)`
//! the other way (every record serializes in Quirl's field order).

use super::{
    CheckDiagnostic, CheckReport, CleanupState, CommandOutcome, CommandRegistration,
    CompletionConfig, CompletionRegistration, ContributionKind, ContributionRegistration,
    EditorConfig, ErrorCode, ErrorLabel, EventHandlerReport, EventKind, EventSubscription,
    ExecutionContext, ExecutionEffects, ExecutionInput, ExecutionOutcome, ExecutionOutput,
    ExecutionStatus, ExtensionAction, ExtensionCapability, ExtensionEvent, ExtensionEventData,
    HostCall, HostResponse, Operation, OperationKind, OperationResult, OutputStream, OutputTarget,
    ParentFrame, PickerConfig, PluginRegistrations, Policy, PromptConfig, PromptRegistration,
    QuirlConfig, Request, Response, Severity, ShellError, StatuslineConfig, StructuredValue,
    ThemeColors, UiConfig, WorkerFrame,
};
use crate::error::{ErrorKind, ProtocolError};
use crate::json::{Decode, Mode, decode_document_in};
use crate::limits::JSON_DEPTH_MAX;
use serde_json::Value;

/// A `Value` nested deeper than this is refused before it is written out
/// as text (writing is recursive). The wire limit, [`JSON_DEPTH_MAX`], is
/// lower, so every `Value` the limit matters for reaches the strict parser
/// and is judged there, at the same place as on the wire.
const VALUE_WRITE_DEPTH_MAX: usize = 2 * JSON_DEPTH_MAX;

/// Decode `T` from a `Value` under `mode`: written out as JSON text in the
/// value's own key order, then decoded by the strict parser.
pub(crate) fn decode_json_value<T: Decode>(value: &Value, mode: Mode) -> Result<T, ProtocolError> {
    if !crate::codec::nesting_within(value, VALUE_WRITE_DEPTH_MAX) {
        return Err(ProtocolError::new(
            ErrorKind::DepthExceeded,
            format!("the value nests deeper than {JSON_DEPTH_MAX} arrays and objects"),
        ));
    }
    let text = serde_json::to_vec(value)
        .map_err(|error| ProtocolError::domain(format!("the value cannot be written: {error}")))?;
    decode_document_in(&text, mode)
}

/// Decoding of a record from a host's own JSON, by the rules of the wire
/// decoder; and from wire bytes, exactly by them.
///
/// Implemented by every wire record of [`crate::records`] (frames,
/// requests, operations, policies, error records, outcomes, registrations,
/// configurations, …), and by `Vec<T>` and `Option<T>` of any of them
/// (a list of reports, an optional error record); sealed.
/// [`OperationResult`] needs the operation it answers: see
/// [`OperationResult::decode`] and [`OperationResult::from_json_slice`].
///
/// **A host's own JSON** — [`from_json_str`](Self::from_json_str),
/// [`from_json_slice`](Self::from_json_slice),
/// [`from_json_value`](Self::from_json_value) — is read by the wire
/// decoder's rules (SPEC §5: one value, no BOM, no trailing bytes, no
/// duplicate keys, depth, integer widths, unknown fields, wrong types,
/// every domain bound of §6–§8), with one difference, for what a host's
/// serde leaves out (`skip_serializing_if`, `#[serde(default)]`): a member
/// holding a list, a map or an option may be absent, and is read as empty
/// or `None`; a member the wire omits when empty (`error` of a Response,
/// `outcome`/`error` of a HostResponse, `text` of an `output` event) may
/// also be `null`. So Quirl's own `ShellError` JSON, which omits empty
/// `labels`/`context`/`help` and `None` `command`/`exit_status`, decodes,
/// and so does every record that embeds one. An unknown member is still
/// refused, and so is a member of the wrong type or out of its range.
///
/// **Wire bytes** — [`from_wire_slice`](Self::from_wire_slice) — get
/// exactly the wire decoder's verdict (the same record, or the same error)
/// for the same bytes, as a frame's payload does (SPEC §5.9: every
/// required and nullable member present).
///
/// A `Value` has already lost what serde_json drops while parsing text:
/// whitespace around the value, a repeated key (the last one is kept), an
/// integer beyond 64 bits (made a float, so refused as `wrong_type` where
/// the wire says `integer_out_of_range`), and, without serde_json's
/// `preserve_order` feature, the order of object keys (a
/// [`StructuredValue::Record`] comes back sorted). Keys are read in the
/// value's own order, so when a value breaks several rules the one
/// reported can differ from the wire decoder's. Where order or exact text
/// matters, serialize to text (`serde_json::to_string`) and use
/// [`from_json_str`](Self::from_json_str).
///
/// ```
/// use quirl_lua_protocol::ErrorKind;
/// use quirl_lua_protocol::records::{ErrorCode, ShellError, StrictDecode};
/// use serde_json::json;
///
/// // A host's own JSON (for example Quirl's `serde_json::to_value(&its_error)`,
/// // which leaves out empty lists and `None`s) …
/// let record = ShellError::from_json_value(&json!({"code": "resource_limit", "message": "too slow"}))?;
/// assert_eq!(record, ShellError::new(ErrorCode::ResourceLimit, "too slow"));
/// // … and back, with serde alone.
/// let back = serde_json::to_value(&record).map_err(|e| e.to_string());
/// assert_eq!(back.map(|value| value["message"].clone()), Ok(json!("too slow")));
///
/// // The wire's rules: an unknown field is refused, as it is in a frame.
/// let extra = ShellError::from_json_str(r#"{"code":"io","message":"x","colour":1}"#);
/// assert_eq!(extra.unwrap_err().kind(), ErrorKind::UnknownField);
/// // Text keeps what a `Value` cannot: a repeated key.
/// let twice = ShellError::from_json_str(r#"{"code":"io","code":"lua","message":"x"}"#);
/// assert_eq!(twice.unwrap_err().kind(), ErrorKind::DuplicateKey);
/// // On the wire every member is present (SPEC §5.9-c).
/// let short = ShellError::from_wire_slice(br#"{"code":"io","message":"x"}"#);
/// assert_eq!(short.unwrap_err().kind(), ErrorKind::MissingField);
/// # Ok::<(), quirl_lua_protocol::ProtocolError>(())
/// ```
pub trait StrictDecode: Sized + sealed::Sealed {
    /// Decode a host's own JSON document (UTF-8 bytes).
    fn from_json_slice(bytes: &[u8]) -> Result<Self, ProtocolError> {
        decode_document_in(bytes, Mode::Host)
    }

    /// Decode a host's own JSON document.
    fn from_json_str(text: &str) -> Result<Self, ProtocolError> {
        Self::from_json_slice(text.as_bytes())
    }

    /// Decode a host's own `serde_json::Value` (see the trait docs for what
    /// a `Value` cannot carry).
    fn from_json_value(value: &Value) -> Result<Self, ProtocolError> {
        decode_json_value(value, Mode::Host)
    }

    /// Decode wire bytes exactly as a frame's payload is decoded (SPEC §5):
    /// every required and nullable member present, members omitted when
    /// empty never `null`.
    fn from_wire_slice(bytes: &[u8]) -> Result<Self, ProtocolError> {
        decode_document_in(bytes, Mode::Wire)
    }
}

mod sealed {
    /// Only this crate's records (and lists and options of them) implement
    /// [`super::StrictDecode`]; the supertrait is the crate's strict
    /// extraction.
    pub trait Sealed: crate::json::Decode {}
}

impl<T: StrictDecode> sealed::Sealed for Vec<T> {}
impl<T: StrictDecode> StrictDecode for Vec<T> {}

impl<T: StrictDecode> sealed::Sealed for Option<T> {}
impl<T: StrictDecode> StrictDecode for Option<T> {}

macro_rules! strict_decode {
    ($($ty:ty),* $(,)?) => {$(
        impl sealed::Sealed for $ty {}
        impl StrictDecode for $ty {}
    )*};
}

strict_decode!(
    ParentFrame,
    WorkerFrame,
    Request,
    Response,
    Operation,
    HostCall,
    HostResponse,
    Policy,
    ShellError,
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
    CheckReport,
    CheckDiagnostic,
    Severity,
);

impl OperationResult {
    /// Decode the `result` of a response to an operation of `kind` from a
    /// host's own JSON text: the text by SPEC §5, then
    /// [`OperationResult::decode`]'s checks, with the omitted members of
    /// [`StrictDecode`]'s host rules filled in (a host's own
    /// `ExecutionOutcome` whose diagnostics leave out empty lists).
    ///
    /// ```
    /// use quirl_lua_protocol::records::{OperationKind, OperationResult};
    ///
    /// assert_eq!(OperationResult::from_json_slice(OperationKind::Test, b"3")?, OperationResult::TestCount(3));
    /// assert!(OperationResult::from_json_slice(OperationKind::Test, b"0").is_err()); // at least one test
    /// # Ok::<(), quirl_lua_protocol::ProtocolError>(())
    /// ```
    pub fn from_json_slice(kind: OperationKind, bytes: &[u8]) -> Result<Self, ProtocolError> {
        let value: Value = decode_document_in(bytes, Mode::Host).map_err(|e| e.at("result"))?;
        Self::decode_in(kind, &value, Mode::Host)
    }
}
