//! Guest failures as error records.
//!
//! A Lua syntax or runtime error becomes a `lua` error whose message is the
//! Lua message, whose context carries the traceback, and which has one
//! label pointing at the source line Lua reported (when the position names a
//! chunk the worker knows). An [`OpError`] raised by an SDK function keeps
//! its own code and details. Stops are not handled here: the VM owner
//! consults the meter first.
//!
//! # Labels
//! A label's `source` is the complete source text of the chunk when it is at
//! most 64 KiB, and `start..end` is the byte span of the reported line
//! (without its line break). For larger sources the label has no source and
//! the empty `0..0` span, and its message names `chunk:line`.

use crate::error::{LABEL_SOURCE_BYTES_MAX, Label, OpError, clip};

/// Lua's `LUA_IDSIZE`: chunk ids are cut to this many bytes minus one.
const LUA_IDSIZE: usize = 60;
const TRACEBACK_LINES_MAX: usize = 24;

/// A chunk the worker loaded: its name and text.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// The name given by the parent (`source_name`, or `eval`).
    pub name: String,
    /// The source text as loaded.
    pub text: String,
}

impl Chunk {
    /// The name passed to Lua (`=` selects it verbatim in messages; NUL
    /// cannot be passed to Lua and is replaced).
    pub fn lua_name(&self) -> String {
        format!("={}", self.name.replace('\0', "?"))
    }

    /// How Lua prints the chunk in positions.
    fn id(&self) -> String {
        let name = self.name.replace('\0', "?");
        let bytes = name.as_bytes();
        String::from_utf8_lossy(&bytes[..bytes.len().min(LUA_IDSIZE - 1)]).into_owned()
    }
}

/// Byte span of 1-based `line` in `text`, counting line breaks as Lua's
/// lexer does (`\n`, `\r`, `\r\n`, `\n\r`).
pub fn line_span(text: &str, line: u64) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut current = 1_u64;
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\n' || b == b'\r' {
            if current == line {
                return Some((start, i));
            }
            let pair = bytes
                .get(i + 1)
                .is_some_and(|&n| (n == b'\n' || n == b'\r') && n != b);
            i += if pair { 2 } else { 1 };
            current += 1;
            start = i;
        } else {
            i += 1;
        }
    }
    (current == line).then_some((start, bytes.len()))
}

/// Only this many leading bytes of a message are searched for a position.
const LOCATE_BYTES_MAX: usize = 64 * 1024;

/// A `chunk:line:` position found in a message.
struct Position<'a> {
    chunk: &'a Chunk,
    line: u64,
    /// Byte offset of the position in the message.
    at: usize,
    /// Byte offset just past its final `:`.
    end: usize,
}

/// Find the first `chunk:line:` position of a known chunk in `message`.
fn locate<'a>(message: &str, chunks: &'a [&'a Chunk]) -> Option<Position<'a>> {
    let mut end = message.len().min(LOCATE_BYTES_MAX);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let message = &message[..end];
    let mut best: Option<Position<'a>> = None;
    for chunk in chunks {
        let id = chunk.id();
        let needle = format!("{id}:");
        let mut from = 0;
        while let Some(found) = message[from..].find(&needle) {
            let at = from + found;
            let rest = &message[at + id.len() + 1..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let boundary = at == 0 || !message.as_bytes()[at - 1].is_ascii_alphanumeric();
            if boundary
                && !digits.is_empty()
                && rest[digits.len()..].starts_with(':')
                && let Ok(line) = digits.parse::<u64>()
            {
                if best.as_ref().is_none_or(|b| at < b.at) {
                    best = Some(Position {
                        chunk,
                        line,
                        at,
                        end: at + needle.len() + digits.len() + 1,
                    });
                }
                break;
            }
            from = at + needle.chars().next().map_or(1, char::len_utf8);
        }
    }
    best
}

/// A label for the first position of a known chunk found in `text`.
pub fn position_label(text: &str, chunks: &[&Chunk], message: &str) -> Option<Label> {
    let Position { chunk, line, .. } = locate(text, chunks)?;
    let message = clip(message, 4096);
    match line_span(&chunk.text, line) {
        Some((start, end)) if chunk.text.len() <= LABEL_SOURCE_BYTES_MAX => Some(Label {
            source: Some(chunk.text.clone()),
            start: u32::try_from(start).ok()?,
            end: u32::try_from(end).ok()?,
            message,
        }),
        _ => Some(Label {
            source: None,
            start: 0,
            end: 0,
            message: format!("{}:{line}: {message}", chunk.name),
        }),
    }
}

fn split_traceback(text: &str) -> (&str, Option<&str>) {
    match text.find("\nstack traceback:") {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    }
}

fn traceback_context(traceback: &str) -> Vec<String> {
    let mut lines: Vec<String> = traceback
        .lines()
        .filter(|line| !line.contains("[C]: in ?"))
        .take(TRACEBACK_LINES_MAX)
        .map(|line| clip(line.trim(), 1024))
        .collect();
    if lines.len() <= 1 {
        lines.clear();
    }
    lines
}

/// Strip the chunk position from the start of a Lua message (it moves to
/// the label).
fn without_position<'a>(message: &'a str, chunks: &[&Chunk]) -> &'a str {
    if let Some(Position { at: 0, end, .. }) = locate(message, chunks) {
        return message[end..].trim_start();
    }
    message
}

/// Replace heap addresses in a Lua message with `#?` (DESIGN §15.3). Lua
/// prints an uncaught error object that is not a string as
/// `<kind>: 0x<address>`; the sandbox's `tostring` never shows addresses,
/// and neither may an error record. A `0x` run of at least six hex digits
/// right after `<name>: ` is taken for an address.
pub fn hide_addresses(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(": 0x") {
        let (before, after) = rest.split_at(at + 2);
        let named = before[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let digits = after[2..].bytes().take_while(u8::is_ascii_hexdigit).count();
        out.push_str(before);
        if named && digits >= 6 {
            out.push_str("#?");
            rest = &after[2 + digits..];
        } else {
            out.push_str("0x");
            rest = &after[2..];
        }
    }
    out.push_str(rest);
    out
}

/// Map a Lua error to an error record, labelling the first position that
/// names one of `chunks`.
pub fn lua_failure(error: &mlua::Error, chunks: &[&Chunk]) -> OpError {
    if let Some(op) = error.downcast_ref::<OpError>() {
        let mut op = op.clone();
        if op.labels.is_empty() {
            let trace = error.to_string();
            if let Some(label) = position_label(&trace, chunks, "failed Lua operation") {
                op.labels.push(label);
            }
        }
        return op;
    }
    match error {
        mlua::Error::SyntaxError { message, .. } => syntax_failure(message, chunks),
        mlua::Error::RuntimeError(text) => runtime_failure(text, chunks),
        mlua::Error::CallbackError { traceback, cause } => {
            let mut op = lua_failure(cause, chunks);
            if op.labels.is_empty()
                && let Some(label) = position_label(traceback, chunks, &op.message)
            {
                op.labels.push(label);
            }
            op
        }
        mlua::Error::MemoryError(message) => {
            OpError::resource_limit("Lua exceeded its configured memory budget")
                .with_context("limit: memory")
                .with_context(message.clone())
        }
        other => {
            let text = hide_addresses(&other.to_string());
            let (message, _) = split_traceback(&text);
            let mut op = OpError::lua(format!("Lua error: {message}"))
                .with_help("Fix the Lua error at the labelled line");
            if let Some(label) = position_label(&text, chunks, message) {
                op.labels.push(label);
            }
            op
        }
    }
}

/// A compile error: its first line, without the chunk position (which
/// becomes the label).
fn syntax_failure(message: &str, chunks: &[&Chunk]) -> OpError {
    let first = message.lines().next().unwrap_or_default();
    let text = without_position(first, chunks);
    let mut op = OpError::lua(format!("Lua syntax error: {text}"))
        .with_context("lua failure: syntax")
        .with_help("Fix the Lua syntax at the labelled line");
    if let Some(label) = position_label(message, chunks, text) {
        op.labels.push(label);
    }
    op
}

/// A runtime error: its message without the chunk position and with
/// addresses hidden, labelled at the position in the message or else in the
/// traceback, whose frames become context.
fn runtime_failure(text: &str, chunks: &[&Chunk]) -> OpError {
    let text = &hide_addresses(text);
    let (message, traceback) = split_traceback(text);
    let shown = without_position(message, chunks);
    let mut op = OpError::lua(format!("Lua runtime error: {shown}"))
        .with_context("lua failure: runtime")
        .with_help("Fix the Lua error at the labelled line");
    if let Some(label) = position_label(message, chunks, shown)
        .or_else(|| traceback.and_then(|t| position_label(t, chunks, shown)))
    {
        op.labels.push(label);
    }
    if let Some(traceback) = traceback {
        op.context.extend(traceback_context(traceback));
    }
    op
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn line_spans_follow_luas_line_breaks() {
        let text = "a\nbb\r\nccc\rd";
        assert_eq!(line_span(text, 1), Some((0, 1)));
        assert_eq!(line_span(text, 2), Some((2, 4)));
        assert_eq!(line_span(text, 3), Some((6, 9)));
        assert_eq!(line_span(text, 4), Some((10, 11)));
        assert_eq!(line_span(text, 5), None);
    }

    #[test]
    fn runtime_errors_label_the_reported_line() {
        let chunk = Chunk {
            name: "init.lua".to_owned(),
            text: "local x = 1\nerror('boom')\n".to_owned(),
        };
        let error = mlua::Error::RuntimeError(
            "init.lua:2: boom\nstack traceback:\n\t[C]: in function 'error'\n\tinit.lua:2: in main chunk".to_owned(),
        );
        let op = lua_failure(&error, &[&chunk]);
        assert_eq!(op.code, crate::error::ErrorCode::Lua);
        assert_eq!(op.message, "Lua runtime error: boom");
        let label = &op.labels[0];
        assert_eq!((label.start, label.end), (12, 25));
        assert_eq!(label.source.as_deref(), Some(chunk.text.as_str()));
    }

    #[test]
    fn positions_are_found_after_multibyte_names_and_in_long_messages() {
        let chunk = Chunk {
            name: "é.lua".to_owned(),
            text: "a\nb\n".to_owned(),
        };
        let message = format!("{}é.lua:2: boom", "é.lua:x ".repeat(1000));
        let label = position_label(&message, &[&chunk], "boom").unwrap();
        assert_eq!((label.start, label.end), (2, 3));
        let long = format!("{}é.lua:2: late", "x".repeat(100_000));
        assert!(position_label(&long, &[&chunk], "late").is_none());
    }

    #[test]
    fn large_sources_are_named_instead_of_carried() {
        let chunk = Chunk {
            name: "big.lua".to_owned(),
            text: format!("{}\nerror('x')", "-- pad\n".repeat(20_000)),
        };
        let error = mlua::Error::RuntimeError("big.lua:20001: x".to_owned());
        let label = lua_failure(&error, &[&chunk]).labels.remove(0);
        assert_eq!(label.source, None);
        assert_eq!((label.start, label.end), (0, 0));
        assert!(label.message.starts_with("big.lua:20001:"));
    }
}
