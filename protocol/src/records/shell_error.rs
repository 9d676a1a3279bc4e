//! The error record (`ShellError`) and its nine v1 error codes.

use crate::error::{ErrorContext, ErrorKind, ProtocolError};
use crate::json::{Validate, decode_record, string_enum};
use crate::limits::{ERROR_ITEMS_MAX, ERROR_TEXT_BYTES_MAX};
use serde::Serialize;

/// The nine stable error codes of v1 (snake_case on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The command name or form is not supported.
    InvalidCommand,
    /// A recognized command received an invalid argument.
    InvalidArgument,
    /// Structured input could not be parsed, converted or evaluated.
    Data,
    /// A stream, filesystem or other host I/O operation failed.
    Io,
    /// A process could not be started.
    ProcessSpawn,
    /// Script source could not be read.
    ScriptRead,
    /// Lua parsing, evaluation or host-boundary processing failed.
    Lua,
    /// Input crossed a schema, protocol or semantic validation boundary.
    Validation,
    /// A byte, count, depth, instruction or time bound was exceeded.
    ResourceLimit,
}

string_enum!(ErrorCode "error code" {
    "invalid_command" => InvalidCommand,
    "invalid_argument" => InvalidArgument,
    "data" => Data,
    "io" => Io,
    "process_spawn" => ProcessSpawn,
    "script_read" => ScriptRead,
    "lua" => Lua,
    "validation" => Validation,
    "resource_limit" => ResourceLimit,
});

impl ErrorCode {
    /// The code whose wire name is `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|code| code.as_str() == name)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An annotation over the half-open byte range `start..end` of optional source text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ErrorLabel {
    /// The source text the range points into, when it may be shared (`null` otherwise).
    pub source: Option<String>,
    /// Inclusive start byte offset.
    pub start: u32,
    /// Exclusive end byte offset.
    pub end: u32,
    /// What the range shows.
    pub message: String,
}

decode_record!(ErrorLabel "error label" {
    source: req,
    start: req,
    end: req,
    message: req,
});

impl Validate for ErrorLabel {}

/// The error record of v1: a stable code, a message and optional details.
///
/// Wire order: `code, message, labels, context, help, command, exit_status`;
/// `command` and `exit_status` are written as `null` when absent. Bounds:
/// at most [`ERROR_ITEMS_MAX`] items per list, at most
/// [`ERROR_TEXT_BYTES_MAX`] bytes of text in total, and label spans ordered
/// (and on UTF-8 boundaries where they fall inside their source).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ShellError {
    /// Stable category.
    pub code: ErrorCode,
    /// Primary message.
    pub message: String,
    /// Source annotations.
    pub labels: Vec<ErrorLabel>,
    /// Supporting facts.
    pub context: Vec<String>,
    /// Recovery advice.
    pub help: Vec<String>,
    /// The command associated with the failure.
    pub command: Option<String>,
    /// A child-process exit status associated with the failure.
    pub exit_status: Option<i32>,
}

decode_record!(ShellError "error record" {
    code: req,
    message: req,
    labels: req,
    context: req,
    help: req,
    command: req,
    exit_status: req,
});

/// `.with_context(…)` appends a line to `context` (the builder is
/// [`ErrorContext::with_context`], re-exported at the crate root).
impl ErrorContext for ShellError {
    fn append_context(&mut self, line: String) {
        self.context.push(line);
    }
}

impl ShellError {
    /// [`ErrorContext::with_context`], callable without importing the
    /// trait (as before the trait existed): the same builder, which
    /// appends `context` after the context already there.
    #[must_use]
    pub fn with_context(self, context: impl Into<String>) -> Self {
        ErrorContext::with_context(self, context)
    }

    /// An error record with a code and message and no details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            labels: Vec::new(),
            context: Vec::new(),
            help: Vec::new(),
            command: None,
            exit_status: None,
        }
    }

    /// Append a help line.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help.push(help.into());
        self
    }

    /// Append a label.
    pub fn with_label(
        mut self,
        source: Option<String>,
        start: u32,
        end: u32,
        message: impl Into<String>,
    ) -> Self {
        self.labels.push(ErrorLabel {
            source,
            start,
            end,
            message: message.into(),
        });
        self
    }

    /// Set the associated command (replacing one set before).
    #[must_use]
    pub fn with_command(mut self, command: impl Into<String>) -> Self {
        self.command = Some(command.into());
        self
    }

    /// Set the associated child-process exit status (replacing one set
    /// before).
    #[must_use]
    pub fn with_exit_status(mut self, exit_status: i32) -> Self {
        self.exit_status = Some(exit_status);
        self
    }

    /// Total UTF-8 bytes of text, as counted against [`ERROR_TEXT_BYTES_MAX`].
    pub fn text_bytes(&self) -> usize {
        let mut bytes = self.message.len();
        for label in &self.labels {
            bytes = bytes.saturating_add(label.message.len());
            if let Some(source) = &label.source {
                bytes = bytes.saturating_add(source.len());
            }
        }
        for text in self.context.iter().chain(&self.help) {
            bytes = bytes.saturating_add(text.len());
        }
        if let Some(command) = &self.command {
            bytes = bytes.saturating_add(command.len());
        }
        bytes
    }

    /// Check the record bounds (`error_record_bounds`).
    pub fn validate(&self) -> Result<(), ProtocolError> {
        for (list, count) in [
            ("labels", self.labels.len()),
            ("context", self.context.len()),
            ("help", self.help.len()),
        ] {
            if count > ERROR_ITEMS_MAX {
                return Err(bounds(format!(
                    "error record has {count} {list} items; at most {ERROR_ITEMS_MAX} are allowed"
                ))
                .at(list));
            }
        }
        for (index, label) in self.labels.iter().enumerate() {
            if label.start > label.end {
                return Err(bounds("error label span is reversed")
                    .at_index(index)
                    .at("labels"));
            }
            if let Some(source) = &label.source {
                let (start, end) = (label.start as usize, label.end as usize);
                if end <= source.len()
                    && (!source.is_char_boundary(start) || !source.is_char_boundary(end))
                {
                    return Err(bounds("error label span is not on UTF-8 boundaries")
                        .at_index(index)
                        .at("labels"));
                }
            }
        }
        let bytes = self.text_bytes();
        if bytes > ERROR_TEXT_BYTES_MAX {
            return Err(bounds(format!(
                "error record has {bytes} bytes of text; at most {ERROR_TEXT_BYTES_MAX} are allowed"
            )));
        }
        Ok(())
    }
}

fn bounds(message: impl Into<String>) -> ProtocolError {
    ProtocolError::new(ErrorKind::ErrorRecordBounds, message)
}

impl Validate for ShellError {
    fn validate(&self) -> Result<(), ProtocolError> {
        ShellError::validate(self)
    }
}

impl std::fmt::Display for ShellError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ShellError {}
