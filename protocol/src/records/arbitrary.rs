//! `arbitrary::Arbitrary` for every record (feature `arbitrary`): values
//! built from unstructured bytes that stay within the protocol's bounds
//! (SPEC §6–§10), so that each one encodes, and decodes back equal, under
//! the codec's rules. A host fuzzes its own code with these types; the
//! crate's own fuzz targets (`fuzz/`) build frames and sessions from them.
//!
//! Hand-written rather than derived: most records carry a domain rule a
//! derive would break (ordered label spans, portable names, terminal-safe
//! text, a policy in range, call ids 1..=16, the exact descriptor), and the
//! derive would add a proc-macro crate. Sizes are kept small (a few items
//! per list, short strings, shallow values): a fuzzer explores shapes, and
//! every bound of Appendix A stays far away.

use super::{
    CheckDiagnostic, CheckReport, CleanupState, CommandOutcome, CommandRegistration,
    CompletionConfig, CompletionRegistration, ContributionKind, ContributionRegistration,
    EditorConfig, ErrorCode, ErrorLabel, EventHandlerReport, EventKind, EventSubscription,
    ExecutionContext, ExecutionEffects, ExecutionInput, ExecutionOutcome, ExecutionOutput,
    ExecutionStatus, ExtensionAction, ExtensionCapability, ExtensionEvent, ExtensionEventData,
    HostCall, HostResponse, Operation, OperationKind, OperationResult, OutputStream, OutputTarget,
    ParentFrame, PickerConfig, PluginRegistrations, Policy, PolicySettings, PromptConfig,
    PromptRegistration, QuirlConfig, Request, Response, Severity, ShellError, StatuslineConfig,
    StructuredValue, ThemeColors, UiConfig, WorkerFrame,
};
use crate::limits::{
    CAPTURE_BYTES_MAX, EXTENSION_DEADLINE_MS_MAX, EXTENSION_PROTOCOL_VERSION,
    HOST_CALLS_PER_REQUEST_MAX, HOST_OUTPUT_BYTES_MAX, LUA_WORKER_PROTOCOL_DESCRIPTOR,
    POLICY_INSTRUCTIONS_MAX, POLICY_MEMORY_BYTES_MAX, POLICY_WALL_TIME_MS_MAX,
    PROMPT_DEADLINE_MS_MAX,
};
use arbitrary::{Arbitrary, Result, Unstructured};
use serde_json::{Map, Number, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Items per generated list at most.
const ITEMS_MAX: usize = 4;
/// Characters per generated string at most.
const CHARS_MAX: usize = 24;
/// Nesting of generated values at most.
const DEPTH_MAX: usize = 3;

/// Characters of terminal-safe text: printable ASCII, a space, and a few
/// multi-byte characters (2, 3 and 4 bytes of UTF-8).
const SAFE_CHARS: &[char] = &[
    'a', 'b', 'z', 'A', 'Q', '0', '7', ' ', '-', '_', '.', '/', ':', '"', '\\', '\'', '{', '}',
    '[', '%', '=', 'é', 'ß', '€', '中', '😀',
];

/// Characters of a portable name (SPEC §7.2).
const PORTABLE_CHARS: &[u8] = b"abcxyzABZ019._-/";

/// How many items a list gets: `0..=max`.
fn count(u: &mut Unstructured<'_>, max: usize) -> Result<usize> {
    u.int_in_range(0..=max)
}

/// Any text (control characters, NUL and all of Unicode included), short.
fn text(u: &mut Unstructured<'_>) -> Result<String> {
    let length = count(u, CHARS_MAX)?;
    (0..length).map(|_| char::arbitrary(u)).collect()
}

/// Text without control characters other than newline and tab.
fn safe_text(u: &mut Unstructured<'_>) -> Result<String> {
    let length = count(u, CHARS_MAX)?;
    (0..length)
        .map(|_| {
            Ok(match u.int_in_range(0_u8..=15)? {
                0 => '\n',
                1 => '\t',
                _ => *u.choose(SAFE_CHARS)?,
            })
        })
        .collect()
}

/// Terminal-safe text that is not blank (a registration's `bounded_text`).
fn filled_text(u: &mut Unstructured<'_>) -> Result<String> {
    let mut text = String::from(*u.choose(&['a', 'é', 'Z', '1'])?);
    text.push_str(&safe_text(u)?);
    Ok(text)
}

/// A portable name: ASCII letters, digits, `.`, `_`, `-`, `/`; non-empty.
fn portable(u: &mut Unstructured<'_>) -> Result<String> {
    let length = u.int_in_range(1..=16)?;
    (0..length)
        .map(|_| u.choose(PORTABLE_CHARS).map(|&byte| char::from(byte)))
        .collect()
}

/// An environment name: `[A-Za-z_][A-Za-z0-9_]*`, never with `=` or NUL.
fn environment_name(u: &mut Unstructured<'_>) -> Result<String> {
    let mut name = String::from(*u.choose(&['A', 'z', '_'])?);
    for _ in 0..count(u, 8)? {
        name.push(*u.choose(&['A', 'b', '0', '9', '_'])?);
    }
    Ok(name)
}

/// Text without NUL.
fn text_without_nul(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(text(u)?.replace('\0', "\u{1}"))
}

fn list<'a, T>(
    u: &mut Unstructured<'a>,
    max: usize,
    mut item: impl FnMut(&mut Unstructured<'a>) -> Result<T>,
) -> Result<Vec<T>> {
    (0..count(u, max)?).map(|_| item(u)).collect()
}

fn option<'a, T>(
    u: &mut Unstructured<'a>,
    item: impl FnOnce(&mut Unstructured<'a>) -> Result<T>,
) -> Result<Option<T>> {
    if bool::arbitrary(u)? {
        item(u).map(Some)
    } else {
        Ok(None)
    }
}

/// One of the values a string enum of the codec takes.
macro_rules! choose_all {
    ($($ty:ty),* $(,)?) => {$(
        impl<'a> Arbitrary<'a> for $ty {
            fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
                u.choose(<$ty>::ALL).copied()
            }
        }
    )*};
}

choose_all!(
    ErrorCode,
    CleanupState,
    OutputStream,
    EventKind,
    ContributionKind,
    ExtensionCapability,
);

/// A free-form JSON value: any finite number, any text, nested at most
/// `depth` levels (SPEC §5.7).
fn free_value(u: &mut Unstructured<'_>, depth: usize) -> Result<Value> {
    let nested = depth > 0;
    Ok(match u.int_in_range(0_u8..=if nested { 7 } else { 5 })? {
        0 => Value::Null,
        1 => Value::Bool(bool::arbitrary(u)?),
        2 => Value::from(i64::arbitrary(u)?),
        3 => Value::from(u64::arbitrary(u)?),
        4 => Number::from_f64(f64::arbitrary(u)?).map_or(Value::Null, Value::Number),
        5 => Value::String(text(u)?),
        6 => Value::Array(list(u, ITEMS_MAX, |u| free_value(u, depth - 1))?),
        _ => {
            let mut map = Map::new();
            for _ in 0..count(u, ITEMS_MAX)? {
                map.insert(text(u)?, free_value(u, depth - 1)?);
            }
            Value::Object(map)
        }
    })
}

/// A free-form value without terminal control characters in any key or
/// string (`contribution` results, `annotate_result` values).
fn safe_value(u: &mut Unstructured<'_>, depth: usize) -> Result<Value> {
    let nested = depth > 0;
    Ok(match u.int_in_range(0_u8..=if nested { 5 } else { 3 })? {
        0 => Value::Null,
        1 => Value::from(i64::arbitrary(u)?),
        2 => Value::Bool(bool::arbitrary(u)?),
        3 => Value::String(safe_text(u)?),
        4 => Value::Array(list(u, ITEMS_MAX, |u| safe_value(u, depth - 1))?),
        _ => {
            let mut map = Map::new();
            for _ in 0..count(u, ITEMS_MAX)? {
                map.insert(safe_text(u)?, safe_value(u, depth - 1)?);
            }
            Value::Object(map)
        }
    })
}

/// Completion items: strings or objects with a string `value` (SPEC §7.2).
fn completion_items(u: &mut Unstructured<'_>) -> Result<Value> {
    let items = list(u, ITEMS_MAX, |u| {
        if bool::arbitrary(u)? {
            return Ok(Value::String(text(u)?));
        }
        let mut item = Map::new();
        item.insert("value".into(), Value::String(text(u)?));
        for key in ["display", "summary", "detail"] {
            if bool::arbitrary(u)? {
                item.insert(key.into(), Value::String(text(u)?));
            }
        }
        Ok(Value::Object(item))
    })?;
    Ok(Value::Array(items))
}

impl<'a> Arbitrary<'a> for PolicySettings {
    /// Always in range: a [`Policy`] can be built from it.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(PolicySettings {
            allow_process: bool::arbitrary(u)?,
            memory_limit_bytes: u.int_in_range(1..=POLICY_MEMORY_BYTES_MAX)?,
            instruction_limit: u.int_in_range(1..=POLICY_INSTRUCTIONS_MAX)?,
            wall_time_ms: u.int_in_range(1..=POLICY_WALL_TIME_MS_MAX)?,
        })
    }
}

impl<'a> Arbitrary<'a> for Policy {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Policy::new(PolicySettings::arbitrary(u)?).map_err(|_| arbitrary::Error::IncorrectFormat)
    }
}

impl<'a> Arbitrary<'a> for ErrorLabel {
    /// Ordered spans; with a source, on its UTF-8 boundaries (SPEC §6.9).
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let source = option(u, text)?;
        let (start, end) = match &source {
            Some(source) => {
                let mut boundaries: Vec<usize> = source.char_indices().map(|(at, _)| at).collect();
                boundaries.push(source.len());
                let a = *u.choose(&boundaries)?;
                let b = *u.choose(&boundaries)?;
                (a.min(b), a.max(b))
            }
            None => {
                let a = usize::from(u16::arbitrary(u)?);
                let b = usize::from(u16::arbitrary(u)?);
                (a.min(b), a.max(b))
            }
        };
        Ok(ErrorLabel {
            source,
            start: u32::try_from(start).map_err(|_| arbitrary::Error::IncorrectFormat)?,
            end: u32::try_from(end).map_err(|_| arbitrary::Error::IncorrectFormat)?,
            message: text(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for ShellError {
    /// A few items per list and short texts: within SPEC §6.9's bounds.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(ShellError {
            code: ErrorCode::arbitrary(u)?,
            message: text(u)?,
            labels: list(u, ITEMS_MAX, ErrorLabel::arbitrary)?,
            context: list(u, ITEMS_MAX, text)?,
            help: list(u, ITEMS_MAX, text)?,
            command: option(u, text)?,
            exit_status: option(u, i32::arbitrary)?,
        })
    }
}

impl<'a> Arbitrary<'a> for Severity {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(if bool::arbitrary(u)? {
            Severity::Error
        } else {
            Severity::Warning
        })
    }
}

/// Characters of a rule name after its first letter (SPEC §7.2).
const RULE_CHARS: &[u8] = b"abcxyz019_";

impl<'a> Arbitrary<'a> for CheckDiagnostic {
    /// A snake_case rule name starting with a letter.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let mut rule = String::from(char::from(u.int_in_range(b'a'..=b'z')?));
        for _ in 0..count(u, CHARS_MAX)? {
            rule.push(char::from(*u.choose(RULE_CHARS)?));
        }
        Ok(CheckDiagnostic {
            record: ShellError::arbitrary(u)?,
            rule,
            severity: Severity::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for CheckReport {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(CheckReport {
            diagnostics: list(u, ITEMS_MAX, CheckDiagnostic::arbitrary)?,
        })
    }
}

impl<'a> Arbitrary<'a> for CommandOutcome {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(CommandOutcome {
            status: i32::arbitrary(u)?,
            stdout: option(u, text)?,
            stderr: option(u, text)?,
        })
    }
}

impl<'a> Arbitrary<'a> for HostCall {
    /// A call id in `1..=16`, a cap within `HOST_OUTPUT_BYTES_MAX`.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(HostCall {
            request_id: u64::arbitrary(u)?,
            call_id: u.int_in_range(1..=HOST_CALLS_PER_REQUEST_MAX)?,
            command: text(u)?,
            deadline_ms: u64::arbitrary(u)?,
            max_output_bytes: u.int_in_range(0..=HOST_OUTPUT_BYTES_MAX)?,
        })
    }
}

impl<'a> Arbitrary<'a> for HostResponse {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(HostResponse {
            request_id: u64::arbitrary(u)?,
            call_id: u.int_in_range(1..=HOST_CALLS_PER_REQUEST_MAX)?,
            result: if bool::arbitrary(u)? {
                Ok(CommandOutcome::arbitrary(u)?)
            } else {
                Err(ShellError::arbitrary(u)?)
            },
        })
    }
}

/// A structured value nested at most `depth` levels, records with unique
/// keys (SPEC §6.14).
fn structured_value(u: &mut Unstructured<'_>, depth: usize) -> Result<StructuredValue> {
    let nested = depth > 0;
    Ok(match u.int_in_range(0_u8..=if nested { 12 } else { 10 })? {
        0 => StructuredValue::Nothing,
        1 => StructuredValue::Bool(bool::arbitrary(u)?),
        2 => StructuredValue::Int(i64::arbitrary(u)?),
        3 => StructuredValue::UInt(u64::arbitrary(u)?),
        4 => StructuredValue::Decimal(text(u)?),
        5 => StructuredValue::String(text(u)?),
        6 => StructuredValue::Path(text(u)?),
        7 => StructuredValue::Duration {
            nanoseconds: u64::arbitrary(u)?,
        },
        8 => StructuredValue::Size {
            bytes: u64::arbitrary(u)?,
        },
        9 => StructuredValue::DateTime(text(u)?),
        10 => StructuredValue::Pattern(text(u)?),
        11 => StructuredValue::List(list(u, ITEMS_MAX, |u| structured_value(u, depth - 1))?),
        _ => {
            let mut seen = BTreeSet::new();
            let mut entries = Vec::new();
            for _ in 0..count(u, ITEMS_MAX)? {
                let key = text(u)?;
                let value = structured_value(u, depth - 1)?;
                if seen.insert(key.clone()) {
                    entries.push((key, value));
                }
            }
            StructuredValue::Record(entries)
        }
    })
}

/// `value` with the entries of every record in key order: the form a
/// structured value takes inside a `result`, which travels as a
/// `serde_json::Value` whose object keys are sorted (SPEC §6.2, §12.1).
fn in_key_order(value: StructuredValue) -> StructuredValue {
    match value {
        StructuredValue::List(items) => {
            StructuredValue::List(items.into_iter().map(in_key_order).collect())
        }
        StructuredValue::Record(entries) => {
            let mut entries: Vec<_> = entries
                .into_iter()
                .map(|(key, value)| (key, in_key_order(value)))
                .collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            StructuredValue::Record(entries)
        }
        other => other,
    }
}

impl<'a> Arbitrary<'a> for StructuredValue {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        structured_value(u, DEPTH_MAX)
    }
}

impl<'a> Arbitrary<'a> for ExecutionInput {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(match u.int_in_range(0_u8..=2)? {
            0 => ExecutionInput::None,
            1 => ExecutionInput::Bytes(list(u, 4 * CHARS_MAX, u8::arbitrary)?),
            _ => ExecutionInput::Value(StructuredValue::arbitrary(u)?),
        })
    }
}

impl<'a> Arbitrary<'a> for OutputTarget {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(match u.int_in_range(0_u8..=2)? {
            0 => OutputTarget::Inherit,
            1 => OutputTarget::Capture {
                max_bytes_per_stream: u.int_in_range(1..=CAPTURE_BYTES_MAX)?,
            },
            _ => OutputTarget::Value,
        })
    }
}

impl<'a> Arbitrary<'a> for ExecutionEffects {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(ExecutionEffects {
            read_filesystem: bool::arbitrary(u)?,
            write_filesystem: bool::arbitrary(u)?,
            spawn_process: bool::arbitrary(u)?,
            change_directory: bool::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for ExecutionContext {
    /// Environment names without `=` or NUL, values without NUL, a
    /// non-empty working directory (SPEC §6.11).
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let mut environment = BTreeMap::new();
        for _ in 0..count(u, ITEMS_MAX)? {
            environment.insert(environment_name(u)?, text_without_nul(u)?);
        }
        let mut working_directory = String::from("/");
        working_directory.push_str(&text(u)?);
        Ok(ExecutionContext {
            arguments: list(u, ITEMS_MAX, text)?,
            environment,
            working_directory,
            input: ExecutionInput::arbitrary(u)?,
            output: OutputTarget::arbitrary(u)?,
            declared_effects: ExecutionEffects::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for ExecutionStatus {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(ExecutionStatus::Exited(i32::arbitrary(u)?))
    }
}

impl<'a> Arbitrary<'a> for ExecutionOutput {
    /// Records in key order, the form they have inside a `result`.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(match u.int_in_range(0_u8..=3)? {
            0 => ExecutionOutput::Inherited,
            1 => ExecutionOutput::Bytes {
                stdout: list(u, 4 * CHARS_MAX, u8::arbitrary)?,
                stderr: list(u, 4 * CHARS_MAX, u8::arbitrary)?,
            },
            2 => ExecutionOutput::Value {
                value: in_key_order(StructuredValue::arbitrary(u)?),
            },
            _ => ExecutionOutput::Values {
                values: list(u, ITEMS_MAX, |u| {
                    StructuredValue::arbitrary(u).map(in_key_order)
                })?,
            },
        })
    }
}

impl<'a> Arbitrary<'a> for ExecutionOutcome {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(ExecutionOutcome {
            status: ExecutionStatus::arbitrary(u)?,
            output: ExecutionOutput::arbitrary(u)?,
            diagnostics: list(u, ITEMS_MAX, ShellError::arbitrary)?,
            cleanup: CleanupState::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for ExtensionEventData {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(match u.int_in_range(0_u8..=8)? {
            0 => ExtensionEventData::SessionStart {
                restored: bool::arbitrary(u)?,
            },
            1 => ExtensionEventData::SessionRestore {
                session_id: text(u)?,
            },
            2 => ExtensionEventData::DirectoryChanged {
                previous: text(u)?,
                current: text(u)?,
            },
            3 => ExtensionEventData::CommandPlan {
                source: text(u)?,
                effects: list(u, ITEMS_MAX, text)?,
            },
            4 => ExtensionEventData::ExecutionProgress {
                completed: u64::arbitrary(u)?,
                total: option(u, u64::arbitrary)?,
                message: option(u, text)?,
            },
            5 => ExtensionEventData::Output {
                stream: OutputStream::arbitrary(u)?,
                bytes: u64::arbitrary(u)?,
                text: option(u, text)?,
            },
            6 => ExtensionEventData::Cancellation { reason: text(u)? },
            7 => ExtensionEventData::Result {
                status: i32::arbitrary(u)?,
                duration_ms: u64::arbitrary(u)?,
            },
            _ => ExtensionEventData::Error {
                error: ShellError::arbitrary(u)?,
            },
        })
    }
}

impl<'a> Arbitrary<'a> for ExtensionEvent {
    /// Always extension protocol version 2 (SPEC §6.16).
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(ExtensionEvent {
            protocol_version: EXTENSION_PROTOCOL_VERSION,
            sequence: u64::arbitrary(u)?,
            data: ExtensionEventData::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for ExtensionAction {
    /// Terminal-safe text, portable names, no NUL in values (SPEC §7.2).
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(match u.int_in_range(0_u8..=4)? {
            0 => ExtensionAction::Diagnose {
                message: safe_text(u)?,
            },
            1 => ExtensionAction::RewritePlan {
                source: safe_text(u)?,
            },
            2 => ExtensionAction::SetEnvironment {
                name: portable(u)?,
                value: text_without_nul(u)?,
            },
            3 => ExtensionAction::BlockExecution {
                reason: safe_text(u)?,
            },
            _ => ExtensionAction::AnnotateResult {
                key: portable(u)?,
                value: safe_value(u, DEPTH_MAX)?,
            },
        })
    }
}

impl<'a> Arbitrary<'a> for EventHandlerReport {
    /// A portable handler name; a failed handler keeps no actions.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let error = option(u, ShellError::arbitrary)?;
        let actions = match error {
            Some(_) => Vec::new(),
            None => list(u, ITEMS_MAX, ExtensionAction::arbitrary)?,
        };
        Ok(EventHandlerReport {
            handler: portable(u)?,
            actions,
            error,
        })
    }
}

impl<'a> Arbitrary<'a> for PromptRegistration {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(PromptRegistration {
            name: filled_text(u)?,
            deadline_ms: u.int_in_range(1..=PROMPT_DEADLINE_MS_MAX)?,
        })
    }
}

impl<'a> Arbitrary<'a> for CompletionRegistration {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(CompletionRegistration {
            command: filled_text(u)?,
        })
    }
}

/// The value kinds a command's contracts name (SPEC §7.2).
const VALUE_KINDS: &[&str] = &[
    "Nothing", "Bool", "Int", "UInt", "Decimal", "String", "List", "Record", "Path", "Duration",
    "Size", "DateTime", "Pattern",
];

impl<'a> Arbitrary<'a> for CommandRegistration {
    /// Non-empty lists and error codes, contracts that name value kinds.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let output_kind = *u.choose(VALUE_KINDS)?;
        let output_type = if bool::arbitrary(u)? {
            format!("Values<{output_kind}>")
        } else {
            output_kind.to_owned()
        };
        let mut error_codes = BTreeMap::new();
        for _ in 0..u.int_in_range(1..=ITEMS_MAX)? {
            error_codes.insert(filled_text(u)?, filled_text(u)?);
        }
        Ok(CommandRegistration {
            name: filled_text(u)?,
            signature: filled_text(u)?,
            summary: filled_text(u)?,
            details: filled_text(u)?,
            input_type: (*u.choose(VALUE_KINDS)?).to_owned(),
            output_type,
            examples: (0..u.int_in_range(1..=ITEMS_MAX)?)
                .map(|_| filled_text(u))
                .collect::<Result<_>>()?,
            effects: (0..u.int_in_range(1..=ITEMS_MAX)?)
                .map(|_| filled_text(u))
                .collect::<Result<_>>()?,
            error_codes,
        })
    }
}

/// A non-empty selection of `all`, each once, in a generated order.
fn distinct<T: Copy + PartialEq>(u: &mut Unstructured<'_>, all: &[T]) -> Result<Vec<T>> {
    let mut chosen: Vec<T> = Vec::new();
    for _ in 0..u.int_in_range(1..=all.len())? {
        let item = *u.choose(all)?;
        if !chosen.contains(&item) {
            chosen.push(item);
        }
    }
    Ok(chosen)
}

impl<'a> Arbitrary<'a> for EventSubscription {
    /// Unique events and capabilities, `events_observe` among them.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let events = distinct(u, EventKind::ALL)?;
        let mut capabilities = distinct(u, ExtensionCapability::ALL)?;
        if !capabilities.contains(&ExtensionCapability::EventsObserve) {
            capabilities.push(ExtensionCapability::EventsObserve);
        }
        Ok(EventSubscription {
            name: portable(u)?,
            events,
            capabilities,
            deadline_ms: u.int_in_range(1..=EXTENSION_DEADLINE_MS_MAX)?,
        })
    }
}

impl<'a> Arbitrary<'a> for ContributionRegistration {
    /// A panel always has its non-empty plain-text fallback.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let kind = ContributionKind::arbitrary(u)?;
        let plain_fallback = match kind {
            ContributionKind::Panel => Some(filled_text(u)?),
            _ => option(u, filled_text)?,
        };
        Ok(ContributionRegistration {
            kind,
            name: portable(u)?,
            deadline_ms: u.int_in_range(1..=EXTENSION_DEADLINE_MS_MAX)?,
            plain_fallback,
        })
    }
}

/// Keep the first of the items with the same key.
fn unique_by<T, K: Ord>(items: Vec<T>, key: impl Fn(&T) -> K) -> Vec<T> {
    let mut seen = BTreeSet::new();
    items
        .into_iter()
        .filter(|item| seen.insert(key(item)))
        .collect()
}

impl<'a> Arbitrary<'a> for PluginRegistrations {
    /// Unique names per collection (SPEC §7.2); possibly nothing at all (a
    /// `load_plugin` result needs one registration: see
    /// [`OperationResult`]'s values).
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(PluginRegistrations {
            prompt_segments: unique_by(list(u, ITEMS_MAX, PromptRegistration::arbitrary)?, |r| {
                r.name.clone()
            }),
            completion_providers: unique_by(
                list(u, ITEMS_MAX, CompletionRegistration::arbitrary)?,
                |r| r.command.clone(),
            ),
            commands: unique_by(list(u, ITEMS_MAX, CommandRegistration::arbitrary)?, |r| {
                r.name.clone()
            }),
            events: unique_by(list(u, ITEMS_MAX, EventSubscription::arbitrary)?, |r| {
                r.name.clone()
            }),
            contributions: unique_by(
                list(u, ITEMS_MAX, ContributionRegistration::arbitrary)?,
                |r| (r.kind.as_str(), r.name.clone()),
            ),
        })
    }
}

impl<'a> Arbitrary<'a> for EditorConfig {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(EditorConfig {
            keymap: text(u)?,
            semantic_hints: bool::arbitrary(u)?,
            banner: text(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for PickerConfig {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(PickerConfig {
            layout: text(u)?,
            preview: bool::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for PromptConfig {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(PromptConfig {
            symbols: text(u)?,
            left: list(u, ITEMS_MAX, text)?,
            right: list(u, ITEMS_MAX, text)?,
            transient: bool::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for ThemeColors {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let mut colors: [String; 14] = Default::default();
        for color in &mut colors {
            *color = text(u)?;
        }
        Ok(ThemeColors::from_colors(colors))
    }
}

impl<'a> Arbitrary<'a> for StatuslineConfig {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(StatuslineConfig {
            hints: bool::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for UiConfig {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let mut themes = BTreeMap::new();
        for _ in 0..count(u, 2)? {
            themes.insert(text(u)?, ThemeColors::arbitrary(u)?);
        }
        Ok(UiConfig {
            surface: text(u)?,
            theme: text(u)?,
            themes,
            statusline: StatuslineConfig::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for CompletionConfig {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(CompletionConfig {
            auto: bool::arbitrary(u)?,
            min_chars: u16::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for QuirlConfig {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(QuirlConfig {
            schema_version: u32::arbitrary(u)?,
            editor: EditorConfig::arbitrary(u)?,
            picker: PickerConfig::arbitrary(u)?,
            prompt: PromptConfig::arbitrary(u)?,
            ui: UiConfig::arbitrary(u)?,
            completion: CompletionConfig::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for Operation {
    /// Any of the twelve; `initialize` carries the exact descriptor, a
    /// `plugin_command` a deadline of at least 1 ms (SPEC §7.1, §8.2).
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(match u.choose(&OperationKind::ALL)? {
            OperationKind::Initialize => Operation::Initialize {
                protocol_descriptor: LUA_WORKER_PROTOCOL_DESCRIPTOR.to_owned(),
                policy: Policy::arbitrary(u)?,
                grants: option(u, |u| list(u, ITEMS_MAX, text))?,
                process_enabled: bool::arbitrary(u)?,
            },
            OperationKind::Eval => Operation::Eval { source: text(u)? },
            OperationKind::Check => Operation::Check {
                source: text(u)?,
                source_name: text(u)?,
            },
            OperationKind::LoadConfig => Operation::LoadConfig {
                source: text(u)?,
                source_name: text(u)?,
            },
            OperationKind::LoadPlugin => Operation::LoadPlugin {
                source: text(u)?,
                source_name: text(u)?,
            },
            OperationKind::RenderPrompt => Operation::RenderPrompt {
                name: text(u)?,
                context: free_value(u, DEPTH_MAX)?,
            },
            OperationKind::Complete => Operation::Complete {
                command: text(u)?,
                context: free_value(u, DEPTH_MAX)?,
            },
            OperationKind::Contribution => Operation::Contribution {
                kind: ContributionKind::arbitrary(u)?,
                name: text(u)?,
                context: free_value(u, DEPTH_MAX)?,
            },
            OperationKind::Run => Operation::Run {
                source: text(u)?,
                source_name: text(u)?,
                context: ExecutionContext::arbitrary(u)?,
            },
            OperationKind::PluginCommand => Operation::PluginCommand {
                name: text(u)?,
                context: ExecutionContext::arbitrary(u)?,
                deadline_ms: u.int_in_range(1..=u64::MAX)?,
            },
            OperationKind::Event => Operation::Event {
                event: ExtensionEvent::arbitrary(u)?,
            },
            OperationKind::Test => Operation::Test {
                source: text(u)?,
                source_name: text(u)?,
            },
        })
    }
}

impl<'a> Arbitrary<'a> for Request {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(Request {
            id: u64::arbitrary(u)?,
            operation: Operation::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for Response {
    /// A free-form result or an error record.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let id = u64::arbitrary(u)?;
        Ok(if bool::arbitrary(u)? {
            Response::success(id, free_value(u, DEPTH_MAX)?)
        } else {
            Response::failure(id, ShellError::arbitrary(u)?)
        })
    }
}

impl<'a> Arbitrary<'a> for ParentFrame {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(if u.ratio(3_u8, 4)? {
            ParentFrame::Request {
                request: Request::arbitrary(u)?,
            }
        } else {
            ParentFrame::HostResponse {
                response: HostResponse::arbitrary(u)?,
            }
        })
    }
}

impl<'a> Arbitrary<'a> for WorkerFrame {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(if u.ratio(3_u8, 4)? {
            WorkerFrame::Response {
                response: Response::arbitrary(u)?,
            }
        } else {
            WorkerFrame::HostCall {
                call: HostCall::arbitrary(u)?,
            }
        })
    }
}

impl OperationResult {
    /// A result of operation `kind`'s shape within that operation's result
    /// domain (SPEC §7.2): what a worker may answer to it. (The
    /// [`Arbitrary`] impl picks the operation too; a test of one operation
    /// uses this.)
    #[cfg_attr(docsrs, doc(cfg(feature = "arbitrary")))]
    pub fn arbitrary_for(kind: OperationKind, u: &mut Unstructured<'_>) -> Result<Self> {
        Ok(match kind {
            OperationKind::Initialize => OperationResult::Null,
            // `null`, or the report a `check.diagnostics` grant asks for.
            OperationKind::Check => match option(u, CheckReport::arbitrary)? {
                Some(report) => OperationResult::CheckReport(report),
                None => OperationResult::Null,
            },
            OperationKind::Eval => OperationResult::Value(free_value(u, DEPTH_MAX)?),
            OperationKind::Complete => OperationResult::Value(completion_items(u)?),
            OperationKind::Contribution => OperationResult::Value(safe_value(u, DEPTH_MAX)?),
            OperationKind::LoadConfig => OperationResult::Config(QuirlConfig::arbitrary(u)?),
            OperationKind::LoadPlugin => {
                let mut plugin = PluginRegistrations::arbitrary(u)?;
                if plugin.prompt_segments.is_empty()
                    && plugin.completion_providers.is_empty()
                    && plugin.commands.is_empty()
                    && plugin.events.is_empty()
                    && plugin.contributions.is_empty()
                {
                    plugin
                        .prompt_segments
                        .push(PromptRegistration::arbitrary(u)?);
                }
                OperationResult::Plugin(plugin)
            }
            OperationKind::RenderPrompt => OperationResult::Prompt(option(u, safe_text)?),
            OperationKind::Run | OperationKind::PluginCommand => {
                OperationResult::Outcome(ExecutionOutcome::arbitrary(u)?)
            }
            OperationKind::Event => {
                // One report per handler, in ascending name order.
                let reports = list(u, ITEMS_MAX, EventHandlerReport::arbitrary)?;
                let mut reports = unique_by(reports, |report| report.handler.clone());
                reports.sort_by(|a, b| a.handler.cmp(&b.handler));
                OperationResult::Reports(reports)
            }
            OperationKind::Test => OperationResult::TestCount(u.int_in_range(1..=u64::MAX)?),
        })
    }
}

impl<'a> Arbitrary<'a> for OperationKind {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        u.choose(&OperationKind::ALL).copied()
    }
}

impl<'a> Arbitrary<'a> for OperationResult {
    /// A result of some operation's shape, within its domain; which
    /// operation is the first [`OperationKind`] it
    /// [fits](OperationResult::fits) (`Value` results are `eval`'s).
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let kind = OperationKind::arbitrary(u)?;
        OperationResult::arbitrary_for(kind, u)
    }
}
