//! Operation errors: the worker's own error record before it becomes a
//! protocol error record.
//!
//! An [`OpError`] carries exactly the fields of the v1 error record (code,
//! message, labels, context, help, command, exit status). The worker builds
//! every diagnostic with it and bounds it with [`OpError::bounded`] before it
//! leaves the worker, so that a guest that raises a 4 MiB error message cannot
//! produce a frame the parent must reject.
//!
//! This module is not the protocol's error type: `serve` maps an `OpError`
//! onto the protocol record at the boundary.

use serde_json::{Map, Value, json};
use std::fmt;

/// At most this many labels, context lines and help lines per record.
pub const ERROR_ITEMS_MAX: usize = 64;
/// At most this many bytes of text in one record (message, label messages and
/// sources, context, help, command together).
pub const ERROR_TEXT_BYTES_MAX: usize = 256 * 1024;
/// A label carries the complete source text only up to this size; larger
/// sources are named in the label message instead.
pub const LABEL_SOURCE_BYTES_MAX: usize = 64 * 1024;
/// Longest single text item kept; longer items are cut at a character
/// boundary and marked with `…`.
const ITEM_BYTES_MAX: usize = 16 * 1024;

/// The nine stable v1 error codes (the protocol crate's type: one
/// definition of the wire vocabulary for both peers).
pub use quirl_lua_protocol::ErrorCode;

/// A diagnostic annotation over the byte range `start..end` of `source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// The complete source text the range points into, when it is retained.
    pub source: Option<String>,
    /// Inclusive start byte offset.
    pub start: u32,
    /// Exclusive end byte offset.
    pub end: u32,
    /// What the range shows.
    pub message: String,
}

/// An operation failure: a boxed [`ErrorRecord`] (boxed so that results
/// carrying it stay small). Its fields are reachable through `Deref`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError(Box<ErrorRecord>);

impl std::ops::Deref for OpError {
    type Target = ErrorRecord;

    fn deref(&self) -> &ErrorRecord {
        &self.0
    }
}

impl std::ops::DerefMut for OpError {
    fn deref_mut(&mut self) -> &mut ErrorRecord {
        &mut self.0
    }
}

impl From<ErrorRecord> for OpError {
    fn from(record: ErrorRecord) -> Self {
        Self(Box::new(record))
    }
}

/// The fields of the v1 error record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorRecord {
    /// Stable category.
    pub code: ErrorCode,
    /// Primary message.
    pub message: String,
    /// Source annotations.
    pub labels: Vec<Label>,
    /// Supporting facts (observed values, limits, underlying errors).
    pub context: Vec<String>,
    /// Recovery advice.
    pub help: Vec<String>,
    /// Command associated with the failure.
    pub command: Option<String>,
    /// Exit status associated with the failure.
    pub exit_status: Option<i32>,
}

impl OpError {
    /// A new error with empty details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self(Box::new(ErrorRecord {
            code,
            message: message.into(),
            labels: Vec::new(),
            context: Vec::new(),
            help: Vec::new(),
            command: None,
            exit_status: None,
        }))
    }

    /// `validation` error.
    pub fn validation(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Validation, message)
    }

    /// `resource_limit` error.
    pub fn resource_limit(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ResourceLimit, message)
    }

    /// `lua` error.
    pub fn lua(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Lua, message)
    }

    /// `validation` error labelled with the name of what failed (Quirl's
    /// `validation_error(source, message)` shape).
    pub fn schema(source: &str, message: impl Into<String>) -> Self {
        Self::validation(message)
            .with_label(Label {
                source: Some(source.to_owned()),
                start: 0,
                end: 0,
                message: "schema mismatch".to_owned(),
            })
            .with_help(
                "Check the documented Lua SDK shape and remove unknown fields or invalid values",
            )
    }

    /// Append a context line.
    #[must_use]
    pub fn with_context(mut self, context: impl Into<String>) -> Self {
        self.context.push(context.into());
        self
    }

    /// Append a help line.
    #[must_use]
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help.push(help.into());
        self
    }

    /// Append a label.
    #[must_use]
    pub fn with_label(mut self, label: Label) -> Self {
        self.labels.push(label);
        self
    }

    /// Set the exit status.
    #[must_use]
    pub fn with_exit_status(mut self, status: i32) -> Self {
        self.exit_status = Some(status);
        self
    }

    /// Bring the record within the v1 bounds: at most [`ERROR_ITEMS_MAX`]
    /// items per list, each text item at most 16 KiB, label spans on
    /// character boundaries, and at most [`ERROR_TEXT_BYTES_MAX`] bytes in
    /// total. Items that do not fit are dropped, last first; the message is
    /// always kept (cut if needed).
    #[must_use]
    pub fn bounded(mut self) -> Self {
        let record = &mut *self.0;
        record.bound();
        self
    }
}

impl ErrorRecord {
    fn bound(&mut self) {
        self.message = clip(&self.message, ITEM_BYTES_MAX);
        self.labels.truncate(ERROR_ITEMS_MAX);
        self.context.truncate(ERROR_ITEMS_MAX);
        self.help.truncate(ERROR_ITEMS_MAX);
        for item in self.context.iter_mut().chain(self.help.iter_mut()) {
            *item = clip(item, ITEM_BYTES_MAX);
        }
        if let Some(command) = &mut self.command {
            *command = clip(command, ITEM_BYTES_MAX);
        }
        for label in &mut self.labels {
            label.message = clip(&label.message, ITEM_BYTES_MAX);
            match &label.source {
                Some(source) if source.len() > LABEL_SOURCE_BYTES_MAX => {
                    label.source = None;
                    label.start = 0;
                    label.end = 0;
                }
                Some(source) => {
                    let fits = label.start <= label.end
                        && (label.end as usize) <= source.len()
                        && source.is_char_boundary(label.start as usize)
                        && source.is_char_boundary(label.end as usize);
                    if !fits {
                        label.start = 0;
                        label.end = 0;
                    }
                }
                None => {
                    label.start = 0;
                    label.end = 0;
                }
            }
        }
        // Drop trailing items until the total fits; labels with sources are
        // the largest, so they lose their source text first.
        while self.text_bytes() > ERROR_TEXT_BYTES_MAX {
            if let Some(label) = self.labels.iter_mut().rev().find(|l| l.source.is_some()) {
                label.source = None;
                label.start = 0;
                label.end = 0;
            } else if self.context.pop().is_some()
                || self.help.pop().is_some()
                || self.labels.pop().is_some()
            {
            } else {
                self.command = None;
                self.message = clip(&self.message, ERROR_TEXT_BYTES_MAX / 2);
                break;
            }
        }
    }

    /// Total text bytes as the v1 bound counts them.
    pub fn text_bytes(&self) -> usize {
        let mut total = self.message.len();
        for label in &self.labels {
            total = total.saturating_add(label.message.len());
            if let Some(source) = &label.source {
                total = total.saturating_add(source.len());
            }
        }
        for item in self.context.iter().chain(&self.help) {
            total = total.saturating_add(item.len());
        }
        if let Some(command) = &self.command {
            total = total.saturating_add(command.len());
        }
        total
    }
}

impl OpError {
    /// The record as a JSON value with every field present, as Quirl's
    /// worker writes error records nested inside operation results.
    pub fn to_json(&self) -> Value {
        let labels = self
            .labels
            .iter()
            .map(|label| {
                json!({
                    "source": label.source,
                    "start": label.start,
                    "end": label.end,
                    "message": label.message,
                })
            })
            .collect::<Vec<_>>();
        let mut map = Map::new();
        map.insert("code".to_owned(), Value::from(self.code.as_str()));
        map.insert("message".to_owned(), Value::from(self.message.clone()));
        map.insert("labels".to_owned(), Value::Array(labels));
        map.insert("context".to_owned(), json!(self.context));
        map.insert("help".to_owned(), json!(self.help));
        map.insert("command".to_owned(), json!(self.command));
        map.insert("exit_status".to_owned(), json!(self.exit_status));
        Value::Object(map)
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for OpError {}

/// Cut `text` to at most `limit` bytes at a character boundary, marking a cut
/// with `…`.
pub fn clip(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let mut end = limit.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut clipped = text[..end].to_owned();
    clipped.push('…');
    clipped
}

/// Whether `text` contains characters that could change terminal state when
/// printed (C0/C1 controls other than newline and tab).
pub fn has_terminal_controls(text: &str) -> bool {
    text.chars()
        .any(|c| (c.is_control() && !matches!(c, '\n' | '\t')) || c == '\u{9b}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_keeps_records_within_the_v1_text_budget() {
        let mut error = OpError::lua("x".repeat(1_000_000));
        for _ in 0..100 {
            error = error.with_context("y".repeat(20_000));
        }
        let error = error.bounded();
        assert!(error.text_bytes() <= ERROR_TEXT_BYTES_MAX);
        assert!(error.context.len() <= ERROR_ITEMS_MAX);
        assert!(error.message.ends_with('…'));
    }

    #[test]
    fn bounded_drops_spans_that_are_not_on_character_boundaries() {
        let error = OpError::lua("m")
            .with_label(Label {
                source: Some("é".to_owned()),
                start: 1,
                end: 2,
                message: "bad".to_owned(),
            })
            .bounded();
        assert_eq!((error.labels[0].start, error.labels[0].end), (0, 0));
    }

    #[test]
    fn clip_respects_character_boundaries() {
        let clipped = clip(&"é".repeat(10), 7);
        assert!(clipped.len() <= 7);
        assert!(clipped.ends_with('…'));
    }
}
