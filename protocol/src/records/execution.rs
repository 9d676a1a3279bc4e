//! Execution records: structured values, the `run` context and execution outcomes.

use super::ShellError;
use crate::error::ProtocolError;
use crate::json::{Decode, Parser, Validate, decode_record, decode_tagged, string_enum};
use crate::limits::{
    ARGUMENT_BYTES_MAX, ARGUMENTS_MAX, CAPTURE_BYTES_MAX, DIAGNOSTICS_MAX, ENVIRONMENT_BYTES_MAX,
    ENVIRONMENT_ENTRIES_MAX, EXECUTION_BYTES_MAX, HOST_OUTPUT_BYTES_MAX, VALUE_DEPTH_MAX,
    VALUE_NODES_MAX, VALUE_TEXT_BYTES_MAX, WORKING_DIRECTORY_BYTES_MAX,
};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;

/// A typed value shared by data, scripts, plugins and outcomes.
///
/// Wire form: `{"type":"<snake_case kind>","value":…}`; `nothing` has no
/// `value`. Records keep their key order. Bounds (checked where a value is
/// carried): [`VALUE_NODES_MAX`] nodes, depth [`VALUE_DEPTH_MAX`],
/// [`VALUE_TEXT_BYTES_MAX`] bytes of strings and keys.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum StructuredValue {
    /// Absence of a value.
    Nothing,
    /// A boolean.
    Bool(bool),
    /// A signed 64-bit integer.
    Int(i64),
    /// An unsigned 64-bit integer (wire name `u_int`).
    UInt(u64),
    /// Decimal source text.
    Decimal(String),
    /// Text.
    String(String),
    /// An ordered list.
    List(Vec<StructuredValue>),
    /// An insertion-ordered record; keys are unique.
    Record(
        #[serde(serialize_with = "serialize_record")]
        #[cfg_attr(
            feature = "schema",
            schemars(with = "BTreeMap<String, StructuredValue>")
        )]
        Vec<(String, StructuredValue)>,
    ),
    /// A filesystem path as UTF-8 text.
    Path(String),
    /// An elapsed duration.
    Duration {
        /// Nanoseconds.
        nanoseconds: u64,
    },
    /// A byte size.
    Size {
        /// Bytes.
        bytes: u64,
    },
    /// A date and time as text (wire name `date_time`).
    DateTime(String),
    /// A pattern in its source form.
    Pattern(String),
}

fn serialize_record<S: Serializer>(
    entries: &[(String, StructuredValue)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(entries.len()))?;
    for (key, value) in entries {
        map.serialize_entry(key, value)?;
    }
    map.end()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ValueKind {
    Nothing,
    Bool,
    Int,
    UInt,
    Decimal,
    String,
    List,
    Record,
    Path,
    Duration,
    Size,
    DateTime,
    Pattern,
}

impl ValueKind {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "nothing" => Self::Nothing,
            "bool" => Self::Bool,
            "int" => Self::Int,
            "u_int" => Self::UInt,
            "decimal" => Self::Decimal,
            "string" => Self::String,
            "list" => Self::List,
            "record" => Self::Record,
            "path" => Self::Path,
            "duration" => Self::Duration,
            "size" => Self::Size,
            "date_time" => Self::DateTime,
            "pattern" => Self::Pattern,
            _ => return None,
        })
    }
}

struct DurationWire {
    nanoseconds: u64,
}
decode_record!(DurationWire "duration" { nanoseconds: req });
impl Validate for DurationWire {}

struct SizeWire {
    bytes: u64,
}
decode_record!(SizeWire "size" { bytes: req });
impl Validate for SizeWire {}

fn decode_value_content(
    kind: ValueKind,
    parser: &mut Parser<'_>,
) -> Result<StructuredValue, ProtocolError> {
    Ok(match kind {
        ValueKind::Nothing => StructuredValue::Nothing,
        ValueKind::Bool => StructuredValue::Bool(parser.parse_bool()?),
        ValueKind::Int => StructuredValue::Int(i64::decode(parser)?),
        ValueKind::UInt => StructuredValue::UInt(u64::decode(parser)?),
        ValueKind::Decimal => StructuredValue::Decimal(parser.parse_owned_string()?),
        ValueKind::String => StructuredValue::String(parser.parse_owned_string()?),
        ValueKind::Path => StructuredValue::Path(parser.parse_owned_string()?),
        ValueKind::DateTime => StructuredValue::DateTime(parser.parse_owned_string()?),
        ValueKind::Pattern => StructuredValue::Pattern(parser.parse_owned_string()?),
        ValueKind::List => StructuredValue::List(Vec::<StructuredValue>::decode(parser)?),
        ValueKind::Record => {
            parser.begin_map()?;
            let mut first = true;
            let mut entries: Vec<(String, StructuredValue)> = Vec::new();
            let mut index: Option<std::collections::HashSet<String>> = None;
            while let Some(key) = parser.next_key(&mut first)? {
                let value = StructuredValue::decode(parser).map_err(|e| e.at(&key))?;
                let duplicate = match &mut index {
                    Some(set) => !set.insert(key.to_string()),
                    None => {
                        let duplicate = entries.iter().any(|(seen, _)| *seen == key);
                        if entries.len() >= 16 {
                            index = Some(entries.iter().map(|(k, _)| k.clone()).collect());
                            if let Some(set) = &mut index {
                                set.insert(key.to_string());
                            }
                        }
                        duplicate
                    }
                };
                if duplicate {
                    return Err(ProtocolError::duplicate_key(&key));
                }
                entries.push((key.into_owned(), value));
            }
            StructuredValue::Record(entries)
        }
        ValueKind::Duration => StructuredValue::Duration {
            nanoseconds: DurationWire::decode(parser)?.nanoseconds,
        },
        ValueKind::Size => StructuredValue::Size {
            bytes: SizeWire::decode(parser)?.bytes,
        },
    })
}

impl Decode for StructuredValue {
    fn decode(parser: &mut Parser<'_>) -> Result<Self, ProtocolError> {
        parser.decode_adjacent(
            "structured value",
            "type",
            "value",
            ValueKind::parse,
            |kind| kind != ValueKind::Nothing,
            decode_value_content,
            |_| StructuredValue::Nothing,
        )
    }
}

impl StructuredValue {
    /// Check node, depth and text bounds without recursion (`domain_bounds`).
    pub fn validate(&self) -> Result<(), ProtocolError> {
        validate_values(std::slice::from_ref(self), 0)
    }
}

/// Validate values that sit at `base_depth` together against one node/text budget.
fn validate_values(values: &[StructuredValue], base_depth: usize) -> Result<(), ProtocolError> {
    let mut stack: Vec<(&StructuredValue, usize)> = values
        .iter()
        .rev()
        .map(|value| (value, base_depth))
        .collect();
    let mut nodes = 0_usize;
    let mut text = 0_usize;
    while let Some((value, depth)) = stack.pop() {
        nodes += 1;
        if nodes > VALUE_NODES_MAX {
            return Err(ProtocolError::domain(format!(
                "structured value has more than {VALUE_NODES_MAX} nodes"
            )));
        }
        if depth > VALUE_DEPTH_MAX {
            return Err(ProtocolError::domain(format!(
                "structured value nests deeper than {VALUE_DEPTH_MAX}"
            )));
        }
        match value {
            StructuredValue::Decimal(s)
            | StructuredValue::String(s)
            | StructuredValue::Path(s)
            | StructuredValue::DateTime(s)
            | StructuredValue::Pattern(s) => text = text.saturating_add(s.len()),
            StructuredValue::List(items) => {
                stack.extend(items.iter().rev().map(|item| (item, depth + 1)));
            }
            StructuredValue::Record(entries) => {
                for (key, item) in entries.iter().rev() {
                    text = text.saturating_add(key.len());
                    stack.push((item, depth + 1));
                }
            }
            StructuredValue::Nothing
            | StructuredValue::Bool(_)
            | StructuredValue::Int(_)
            | StructuredValue::UInt(_)
            | StructuredValue::Duration { .. }
            | StructuredValue::Size { .. } => {}
        }
        if text > VALUE_TEXT_BYTES_MAX {
            return Err(ProtocolError::domain(format!(
                "structured value holds more than {VALUE_TEXT_BYTES_MAX} bytes of text"
            )));
        }
    }
    Ok(())
}

/// Input handed to an execution: `{"kind":"none"}`, `{"kind":"bytes","content":[…]}`
/// or `{"kind":"value","content":{…}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(tag = "kind", content = "content", rename_all = "snake_case")]
pub enum ExecutionInput {
    /// No input.
    None,
    /// Uninterpreted bytes (at most [`EXECUTION_BYTES_MAX`]).
    Bytes(Vec<u8>),
    /// One structured value.
    Value(StructuredValue),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum InputKind {
    None,
    Bytes,
    Value,
}

impl Decode for ExecutionInput {
    fn decode(parser: &mut Parser<'_>) -> Result<Self, ProtocolError> {
        let input = parser.decode_adjacent(
            "execution input",
            "kind",
            "content",
            |name| match name {
                "none" => Some(InputKind::None),
                "bytes" => Some(InputKind::Bytes),
                "value" => Some(InputKind::Value),
                _ => None,
            },
            |kind| kind != InputKind::None,
            |kind, parser| match kind {
                InputKind::None => Ok(ExecutionInput::None),
                InputKind::Bytes => Vec::<u8>::decode(parser).map(ExecutionInput::Bytes),
                InputKind::Value => StructuredValue::decode(parser).map(ExecutionInput::Value),
            },
            |_| ExecutionInput::None,
        )?;
        Ok(input)
    }
}

impl ExecutionInput {
    /// Check byte and value bounds (`domain_bounds`).
    pub fn validate(&self) -> Result<(), ProtocolError> {
        match self {
            ExecutionInput::None => Ok(()),
            ExecutionInput::Bytes(bytes) => {
                check_bytes("execution input", bytes.len(), EXECUTION_BYTES_MAX)
            }
            ExecutionInput::Value(value) => value.validate().map_err(|e| e.at("content")),
        }
    }
}

fn check_bytes(what: &str, observed: usize, limit: usize) -> Result<(), ProtocolError> {
    if observed <= limit {
        Ok(())
    } else {
        Err(ProtocolError::domain(format!(
            "{what} holds {observed} bytes; at most {limit} are allowed"
        )))
    }
}

/// The output representation requested from an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OutputTarget {
    /// Output goes to the caller's sink and is not retained.
    Inherit,
    /// Retain each stream up to a ceiling (1..=[`CAPTURE_BYTES_MAX`]).
    Capture {
        /// Maximum retained bytes per stream.
        #[cfg_attr(feature = "schema", schemars(range(min = 1, max = CAPTURE_BYTES_MAX)))]
        max_bytes_per_stream: u64,
    },
    /// Return a structured value.
    Value,
}

decode_tagged!(OutputTarget "output target", tag = "kind" {
    "inherit" => Inherit {},
    "capture" => Capture { max_bytes_per_stream: req },
    "value" => Value {},
});

impl Validate for OutputTarget {
    fn validate(&self) -> Result<(), ProtocolError> {
        if let OutputTarget::Capture {
            max_bytes_per_stream,
        } = *self
            && !(1..=CAPTURE_BYTES_MAX).contains(&max_bytes_per_stream)
        {
            return Err(ProtocolError::domain(format!(
                "capture limit {max_bytes_per_stream} is outside 1..={CAPTURE_BYTES_MAX}"
            ))
            .at("max_bytes_per_stream"));
        }
        Ok(())
    }
}

/// The fixed set of effects an execution declares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ExecutionEffects {
    /// Reads filesystem data.
    pub read_filesystem: bool,
    /// Changes filesystem data.
    pub write_filesystem: bool,
    /// Starts processes.
    pub spawn_process: bool,
    /// Changes the working directory.
    pub change_directory: bool,
}

decode_record!(ExecutionEffects "execution effects" {
    read_filesystem: req,
    write_filesystem: req,
    spawn_process: req,
    change_directory: req,
});
impl Validate for ExecutionEffects {}

/// The context of `run` and `plugin_command` operations.
///
/// Bounds: at most [`ARGUMENTS_MAX`] arguments and [`ARGUMENT_BYTES_MAX`]
/// bytes of them; at most [`ENVIRONMENT_ENTRIES_MAX`] environment entries
/// and [`ENVIRONMENT_BYTES_MAX`] bytes, names non-empty without `=` or NUL,
/// values without NUL; a non-empty working directory of at most
/// [`WORKING_DIRECTORY_BYTES_MAX`] bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ExecutionContext {
    /// Script arguments in order.
    pub arguments: Vec<String>,
    /// Environment snapshot (encoded with sorted names).
    pub environment: BTreeMap<String, String>,
    /// Working directory.
    pub working_directory: String,
    /// Input.
    pub input: ExecutionInput,
    /// Requested output representation.
    pub output: OutputTarget,
    /// Declared effects.
    pub declared_effects: ExecutionEffects,
}

decode_record!(ExecutionContext "execution context" {
    arguments: req,
    environment: req,
    working_directory: req,
    input: req,
    output: req,
    declared_effects: req,
});

impl ExecutionContext {
    /// Check the context bounds (`domain_bounds`).
    pub fn validate(&self) -> Result<(), ProtocolError> {
        self.validate_sizes()?;
        self.input.validate().map_err(|e| e.at("input"))?;
        Validate::validate(&self.output).map_err(|e| e.at("output"))
    }

    fn validate_sizes(&self) -> Result<(), ProtocolError> {
        if self.arguments.len() > ARGUMENTS_MAX {
            return Err(ProtocolError::domain(format!(
                "{} arguments; at most {ARGUMENTS_MAX} are allowed",
                self.arguments.len()
            ))
            .at("arguments"));
        }
        let bytes = self
            .arguments
            .iter()
            .map(String::len)
            .fold(0_usize, usize::saturating_add);
        check_bytes("arguments", bytes, ARGUMENT_BYTES_MAX).map_err(|e| e.at("arguments"))?;
        if self.environment.len() > ENVIRONMENT_ENTRIES_MAX {
            return Err(ProtocolError::domain(format!(
                "{} environment entries; at most {ENVIRONMENT_ENTRIES_MAX} are allowed",
                self.environment.len()
            ))
            .at("environment"));
        }
        let bytes = self
            .environment
            .iter()
            .map(|(name, value)| name.len().saturating_add(value.len()))
            .fold(0_usize, usize::saturating_add);
        check_bytes("environment", bytes, ENVIRONMENT_BYTES_MAX)
            .map_err(|e| e.at("environment"))?;
        for (name, value) in &self.environment {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err(ProtocolError::domain(
                    "environment names must be non-empty and contain neither `=` nor NUL",
                )
                .at("environment"));
            }
            if value.contains('\0') {
                return Err(
                    ProtocolError::domain("environment values must not contain NUL")
                        .at(name)
                        .at("environment"),
                );
            }
        }
        if self.working_directory.is_empty() {
            return Err(ProtocolError::domain("working directory is empty").at("working_directory"));
        }
        check_bytes(
            "working directory",
            self.working_directory.len(),
            WORKING_DIRECTORY_BYTES_MAX,
        )
        .map_err(|e| e.at("working_directory"))
    }

    /// Check the bounds during decoding (nested records were checked already).
    fn validate_local(&self) -> Result<(), ProtocolError> {
        self.validate_sizes()?;
        self.input.validate().map_err(|e| e.at("input"))
    }
}

impl Validate for ExecutionContext {
    fn validate(&self) -> Result<(), ProtocolError> {
        self.validate_local()
    }
}

/// Process-style status of a successful outcome: `{"kind":"exited","code":N}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(tag = "kind", content = "code", rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Completed with this status code.
    Exited(i32),
}

impl Decode for ExecutionStatus {
    fn decode(parser: &mut Parser<'_>) -> Result<Self, ProtocolError> {
        parser.decode_adjacent(
            "execution status",
            "kind",
            "code",
            |name| (name == "exited").then_some(()),
            |()| true,
            |(), parser| i32::decode(parser).map(ExecutionStatus::Exited),
            |()| ExecutionStatus::Exited(0),
        )
    }
}

/// Output of a successful execution.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ExecutionOutput {
    /// Output was inherited, not retained.
    Inherited,
    /// Captured streams (each at most [`EXECUTION_BYTES_MAX`]).
    Bytes {
        /// Standard output bytes.
        stdout: Vec<u8>,
        /// Standard error bytes.
        stderr: Vec<u8>,
    },
    /// One structured value.
    Value {
        /// The value.
        value: StructuredValue,
    },
    /// A finite list of values (within the value node bound).
    Values {
        /// The values in order.
        values: Vec<StructuredValue>,
    },
}

decode_tagged!(ExecutionOutput "execution output", tag = "kind" {
    "inherited" => Inherited {},
    "bytes" => Bytes { stdout: req, stderr: req },
    "value" => Value { value: req },
    "values" => Values { values: req },
});

impl Validate for ExecutionOutput {
    fn validate(&self) -> Result<(), ProtocolError> {
        match self {
            ExecutionOutput::Inherited => Ok(()),
            ExecutionOutput::Bytes { stdout, stderr } => {
                check_bytes("stdout", stdout.len(), EXECUTION_BYTES_MAX)
                    .map_err(|e| e.at("stdout"))?;
                check_bytes("stderr", stderr.len(), EXECUTION_BYTES_MAX).map_err(|e| e.at("stderr"))
            }
            ExecutionOutput::Value { value } => value.validate().map_err(|e| e.at("value")),
            ExecutionOutput::Values { values } => {
                validate_values(values, 1).map_err(|e| e.at("values"))
            }
        }
    }
}

/// Who holds resources after an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "snake_case")]
pub enum CleanupState {
    /// Everything owned by the call was released.
    Complete,
    /// The engine still owns bounded job state.
    RetainedByEngine,
}

string_enum!(CleanupState "cleanup state" {
    "complete" => Complete,
    "retained_by_engine" => RetainedByEngine,
});

/// Result of `run` and `plugin_command`: status, output, diagnostics, cleanup.
///
/// At most [`DIAGNOSTICS_MAX`] diagnostics, each a bounded error record.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ExecutionOutcome {
    /// Status.
    pub status: ExecutionStatus,
    /// Output.
    pub output: ExecutionOutput,
    /// Non-fatal diagnostics.
    pub diagnostics: Vec<ShellError>,
    /// Cleanup state.
    pub cleanup: CleanupState,
}

decode_record!(ExecutionOutcome "execution outcome" {
    status: req,
    output: req,
    diagnostics: req,
    cleanup: req,
});

impl Validate for ExecutionOutcome {
    fn validate(&self) -> Result<(), ProtocolError> {
        if self.diagnostics.len() > DIAGNOSTICS_MAX {
            return Err(ProtocolError::domain(format!(
                "{} diagnostics; at most {DIAGNOSTICS_MAX} are allowed",
                self.diagnostics.len()
            ))
            .at("diagnostics"));
        }
        Ok(())
    }
}

/// Result of one proxied process run: `{"status":N,"stdout":…,"stderr":…}`.
///
/// `stdout`/`stderr` are `null` when output was not captured. Each stands
/// for at most [`HOST_OUTPUT_BYTES_MAX`] captured bytes
/// ([`CommandOutcome::captured_bytes`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CommandOutcome {
    /// Exit status.
    pub status: i32,
    /// Captured standard output.
    pub stdout: Option<String>,
    /// Captured standard error.
    pub stderr: Option<String>,
}

decode_record!(CommandOutcome "command outcome" {
    status: req,
    stdout: req,
    stderr: req,
});
impl Validate for CommandOutcome {
    fn validate(&self) -> Result<(), ProtocolError> {
        CommandOutcome::validate(self)
    }
}

impl CommandOutcome {
    /// The fewest raw bytes a captured stream can stand for: its UTF-8 length
    /// with every U+FFFD REPLACEMENT CHARACTER counted as one byte.
    ///
    /// Hosts (Quirl's and the reference parent) capture raw bytes up to the
    /// call's `max_output_bytes` and decode them lossily, which turns one to
    /// three invalid bytes into U+FFFD (three bytes of UTF-8). Counting it as
    /// one keeps every honestly captured stream within its limit.
    pub fn captured_bytes(text: &str) -> usize {
        let replacements = text
            .chars()
            .filter(|&c| c == char::REPLACEMENT_CHARACTER)
            .count();
        text.len()
            .saturating_sub(replacements.saturating_mul(char::REPLACEMENT_CHARACTER.len_utf8() - 1))
    }

    /// Check that each captured stream stands for at most
    /// [`HOST_OUTPUT_BYTES_MAX`] bytes, the most any host call may ask for
    /// (`domain_bounds`). A session also checks the pending call's own
    /// `max_output_bytes`.
    pub fn validate(&self) -> Result<(), ProtocolError> {
        for (name, stream) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let captured = stream.as_deref().map_or(0, Self::captured_bytes);
            if u64::try_from(captured).map_or(true, |bytes| bytes > HOST_OUTPUT_BYTES_MAX) {
                return Err(ProtocolError::domain(format!(
                    "{name} holds {captured} captured bytes; a host call allows at most {HOST_OUTPUT_BYTES_MAX}"
                ))
                .at(name));
            }
        }
        Ok(())
    }
}
