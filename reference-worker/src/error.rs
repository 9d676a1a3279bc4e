//! Operation errors: the protocol's error record as the worker builds it.
//!
//! An [`OpError`] is a boxed [`ShellError`], the protocol crate's v1 error
//! record (code, message, labels, context, help, command, exit status). The
//! worker builds every diagnostic with it and bounds it with
//! [`OpError::bounded`] before it leaves the worker, so that a guest that
//! raises a 4 MiB error message cannot produce a frame the parent must
//! reject: a bounded record always passes [`ShellError::validate`] (SPEC
//! §6.9, §15.11).

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::limits::{ERROR_ITEMS_MAX, ERROR_TEXT_BYTES_MAX};
use serde_json::Value;
use std::fmt;

/// The nine stable v1 error codes and the error record (the protocol
/// crate's types: one definition of the wire vocabulary for both peers).
pub use quirl_lua_protocol::records::{ErrorCode, ShellError};

/// The protocol's error label, under the short name the worker's
/// diagnostics use.
pub use quirl_lua_protocol::records::ErrorLabel as Label;

/// Whether text could change terminal state when printed (the protocol's
/// rule: control characters other than newline and tab).
pub use quirl_lua_protocol::value::has_terminal_controls;

/// Worker-only (no protocol counterpart; DESIGN §15.11): a label carries the
/// complete source text only up to this size; larger sources are named in
/// the label message instead.
pub const LABEL_SOURCE_BYTES_MAX: usize = 64 * 1024;
/// Worker-only (DESIGN §15.11): longest single text item kept; longer items
/// are cut at a character boundary and marked with `…`.
pub const ITEM_BYTES_MAX: usize = 16 * 1024;

/// An operation failure: a boxed [`ShellError`] (boxed so that results
/// carrying it stay small). Its fields are reachable through `Deref`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError(Box<ShellError>);

impl std::ops::Deref for OpError {
    type Target = ShellError;

    fn deref(&self) -> &ShellError {
        &self.0
    }
}

impl std::ops::DerefMut for OpError {
    fn deref_mut(&mut self) -> &mut ShellError {
        &mut self.0
    }
}

impl From<ShellError> for OpError {
    fn from(record: ShellError) -> Self {
        Self(Box::new(record))
    }
}

impl From<OpError> for ShellError {
    fn from(error: OpError) -> Self {
        *error.0
    }
}

/// `.with_context(…)` appends a line to the record's `context` (the
/// protocol crate's one builder, [`ErrorContext::with_context`]).
impl ErrorContext for OpError {
    fn append_context(&mut self, line: String) {
        self.0.append_context(line);
    }
}

impl OpError {
    /// [`ErrorContext::with_context`], callable without importing the
    /// trait (as before the trait existed): the same builder, which
    /// appends `context` after the context already there.
    #[must_use]
    pub fn with_context(self, context: impl Into<String>) -> Self {
        ErrorContext::with_context(self, context)
    }

    /// A new error with empty details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self(Box::new(ShellError::new(code, message)))
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
    /// items per list, each text item at most [`ITEM_BYTES_MAX`], label
    /// spans on character boundaries, and at most [`ERROR_TEXT_BYTES_MAX`]
    /// bytes in total. Items that do not fit are dropped, last first; the
    /// message is always kept (cut if needed).
    #[must_use]
    pub fn bounded(mut self) -> Self {
        bound(&mut self.0);
        self
    }

    /// The record as a JSON value with every field present, as Quirl's
    /// worker writes error records nested inside operation results.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(&*self.0).unwrap_or(Value::Null)
    }
}

fn bound(record: &mut ShellError) {
    record.message = clip(&record.message, ITEM_BYTES_MAX);
    record.labels.truncate(ERROR_ITEMS_MAX);
    record.context.truncate(ERROR_ITEMS_MAX);
    record.help.truncate(ERROR_ITEMS_MAX);
    for item in record.context.iter_mut().chain(record.help.iter_mut()) {
        *item = clip(item, ITEM_BYTES_MAX);
    }
    if let Some(command) = &mut record.command {
        *command = clip(command, ITEM_BYTES_MAX);
    }
    for label in &mut record.labels {
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
    while record.text_bytes() > ERROR_TEXT_BYTES_MAX {
        if let Some(label) = record.labels.iter_mut().rev().find(|l| l.source.is_some()) {
            label.source = None;
            label.start = 0;
            label.end = 0;
        } else if record.context.pop().is_some()
            || record.help.pop().is_some()
            || record.labels.pop().is_some()
        {
        } else {
            record.command = None;
            record.message = clip(&record.message, ERROR_TEXT_BYTES_MAX / 2);
            break;
        }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
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
    fn bounded_records_pass_the_protocols_validation() {
        let mut error = OpError::lua("x".repeat(300_000)).with_label(Label {
            source: Some("é".repeat(40_000)),
            start: 1,
            end: 3,
            message: "m".repeat(20_000),
        });
        for _ in 0..100 {
            error = error
                .with_context("c".repeat(5_000))
                .with_help("h".repeat(5_000));
        }
        assert!(error.validate().is_err(), "the unbounded record is invalid");
        let bounded = error.bounded();
        bounded
            .validate()
            .expect("a bounded record is a valid v1 record");
    }

    #[test]
    fn to_json_writes_every_field_of_the_protocol_record() {
        let json = OpError::lua("m").with_help("h").to_json();
        assert_eq!(
            serde_json::to_string(&json).expect("encodes"),
            r#"{"code":"lua","command":null,"context":[],"exit_status":null,"help":["h"],"labels":[],"message":"m"}"#
        );
    }

    #[test]
    fn clip_respects_character_boundaries() {
        let clipped = clip(&"é".repeat(10), 7);
        assert!(clipped.len() <= 7);
        assert!(clipped.ends_with('…'));
    }
}
