//! The strict pull parser's structure (SPEC §5.2–§5.5): the parser state,
//! objects and arrays with their nesting depth (§5.4) and duplicate-key
//! check (§5.3), the literals `true`/`false`/`null`, and whole values —
//! skipped or read as free-form [`Value`]s (§5.7).
//!
//! String and number tokens are scanned in the sibling modules `string` and
//! `number`; tagged objects are read in `tagged`.

use super::Result;
use super::number::number_value;
use crate::error::{ErrorKind, ProtocolError};
use crate::limits::JSON_DEPTH_MAX;
use serde_json::{Map, Value};
use std::borrow::Cow;

/// Strict pull parser over validated UTF-8 text.
///
/// Nominally `pub` (the module is private) so that the sealed
/// [`Decode`](super::Decode) trait, a supertrait of the public
/// `records::StrictDecode`, may name it.
pub struct Parser<'a> {
    pub(super) text: &'a str,
    pub(super) bytes: &'a [u8],
    pub(super) pos: usize,
    pub(super) depth: usize,
    /// Which members may be absent: the wire's rules, or a host's own
    /// JSON (empty collections and null options omitted).
    pub(super) mode: Mode,
}

/// Which document is being read: a frame payload, or a host's own JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The wire (SPEC §5.9): every required and nullable member present,
    /// members omitted when empty never `null`.
    Wire,
    /// A host's own serde JSON of a record: as [`Mode::Wire`], except that
    /// a member holding a list, a map or an option may be absent (read as
    /// empty or `None`), and a member the wire omits when empty may be
    /// `null`. Unknown members, wrong types and out-of-range values are
    /// refused exactly as on the wire.
    Host,
}

const fn is_ws(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

fn describe(byte: u8) -> &'static str {
    match byte {
        b'{' => "an object",
        b'[' => "an array",
        b'"' => "a string",
        b't' | b'f' => "a boolean",
        b'n' => "null",
        b'-' | b'0'..=b'9' => "a number",
        _ => "an invalid token",
    }
}

impl<'a> Parser<'a> {
    /// Start parsing `text`, which must begin with the value itself.
    pub(crate) fn new(text: &'a str, mode: Mode) -> Result<Self> {
        let bytes = text.as_bytes();
        match bytes.first() {
            None => return Err(ProtocolError::malformed("payload is empty")),
            Some(&byte) if is_ws(byte) => {
                return Err(ProtocolError::malformed("payload starts with whitespace"));
            }
            Some(_) => {}
        }
        Ok(Self {
            text,
            bytes,
            pos: 0,
            depth: 0,
            mode,
        })
    }

    /// Whether members a host's serde skips may be absent ([`Mode::Host`]).
    pub(crate) fn fills_omitted(&self) -> bool {
        self.mode == Mode::Host
    }

    /// Require that the value consumed the whole payload.
    pub(crate) fn finish(&self) -> Result<()> {
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(ProtocolError::new(
                ErrorKind::TrailingBytes,
                format!(
                    "{} byte(s) follow the JSON value",
                    self.bytes.len() - self.pos
                ),
            )
            .with_context(format!("byte offset {}", self.pos)))
        }
    }

    pub(super) fn err_here(&self, message: &str) -> ProtocolError {
        ProtocolError::malformed(message.to_owned())
            .with_context(format!("byte offset {}", self.pos))
    }

    #[inline]
    pub(super) fn skip_ws(&mut self) {
        while let Some(&byte) = self.bytes.get(self.pos) {
            if is_ws(byte) {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    /// The first byte of the next token (whitespace skipped), if any.
    #[inline]
    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.bytes.get(self.pos).copied()
    }

    /// Peek at the next value's first byte; end of input is malformed.
    #[inline]
    pub(super) fn peek_value(&mut self) -> Result<u8> {
        self.peek()
            .ok_or_else(|| self.err_here("unexpected end of JSON input"))
    }

    /// Report `expected` against the value that stands here.
    ///
    /// The value is checked for well-formedness first, so a malformed value
    /// is reported as malformed rather than as the wrong type.
    pub(super) fn type_error(&mut self, expected: &str) -> ProtocolError {
        let byte = match self.peek_value() {
            Ok(byte) => byte,
            Err(error) => return error,
        };
        let found = describe(byte);
        let start = self.pos;
        if let Err(error) = self.skip_value() {
            return error;
        }
        self.pos = start;
        ProtocolError::wrong_type(expected, found)
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > JSON_DEPTH_MAX {
            return Err(ProtocolError::new(
                ErrorKind::DepthExceeded,
                format!("JSON nesting deeper than {JSON_DEPTH_MAX} levels"),
            )
            .with_context(format!("byte offset {}", self.pos)));
        }
        Ok(())
    }

    pub(super) fn expect_literal(&mut self, literal: &'static [u8]) -> Result<()> {
        if self.bytes[self.pos..].starts_with(literal) {
            self.pos += literal.len();
            Ok(())
        } else {
            Err(self.err_here("invalid literal"))
        }
    }

    // ----- objects and arrays -------------------------------------------------

    /// Consume `{` of a record; anything else is `not_an_object`.
    pub(crate) fn begin_object(&mut self, record: &str) -> Result<()> {
        let byte = self.peek_value()?;
        if byte != b'{' {
            let found = describe(byte);
            let start = self.pos;
            self.skip_value()?;
            self.pos = start;
            return Err(ProtocolError::new(
                ErrorKind::NotAnObject,
                format!("expected {record} as a JSON object, found {found}"),
            ));
        }
        self.enter()?;
        self.pos += 1;
        Ok(())
    }

    /// Consume `{` of a map (a free-keyed object field); anything else is `wrong_type`.
    pub(crate) fn begin_map(&mut self) -> Result<()> {
        if self.peek_value()? != b'{' {
            return Err(self.type_error("an object"));
        }
        self.enter()?;
        self.pos += 1;
        Ok(())
    }

    /// The next key of the current object and its `:`, or `None` after `}`.
    ///
    /// `first` tracks whether a comma is due; start with `true`.
    pub(crate) fn next_key(&mut self, first: &mut bool) -> Result<Option<Cow<'a, str>>> {
        match self.peek() {
            Some(b'}') => {
                self.pos += 1;
                self.depth -= 1;
                return Ok(None);
            }
            Some(b',') if !*first => {
                self.pos += 1;
                self.skip_ws();
            }
            Some(b'"') if *first => {}
            _ => return Err(self.err_here("expected a key, `,` or `}` in an object")),
        }
        if self.bytes.get(self.pos) != Some(&b'"') {
            return Err(self.err_here("expected a string key"));
        }
        *first = false;
        let key = self.scan_string()?;
        if self.peek() != Some(b':') {
            return Err(self.err_here("expected `:` after an object key"));
        }
        self.pos += 1;
        Ok(Some(key))
    }

    /// Consume `[`; anything else is `wrong_type`.
    pub(crate) fn begin_array(&mut self) -> Result<()> {
        if self.peek_value()? != b'[' {
            return Err(self.type_error("an array"));
        }
        self.enter()?;
        self.pos += 1;
        Ok(())
    }

    /// Whether another array element follows (its comma consumed), or `]` was consumed.
    pub(crate) fn next_element(&mut self, first: &mut bool) -> Result<bool> {
        match self.peek() {
            Some(b']') => {
                self.pos += 1;
                self.depth -= 1;
                Ok(false)
            }
            Some(b',') if !*first => {
                self.pos += 1;
                Ok(true)
            }
            Some(_) if *first => {
                *first = false;
                Ok(true)
            }
            _ => Err(self.err_here("expected `,` or `]` in an array")),
        }
    }

    // ----- scalars ----------------------------------------------------------
    // ----- literals ---------------------------------------------------------

    /// Parse `true` or `false`.
    pub(crate) fn parse_bool(&mut self) -> Result<bool> {
        match self.peek_value()? {
            b't' => self.expect_literal(b"true").map(|()| true),
            b'f' => self.expect_literal(b"false").map(|()| false),
            _ => Err(self.type_error("a boolean")),
        }
    }

    /// Consume `null` if it stands here.
    pub(crate) fn take_null(&mut self) -> Result<bool> {
        if self.peek_value()? == b'n' {
            self.expect_literal(b"null")?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Whether the next value is `null` (not consumed).
    pub(crate) fn at_null(&mut self) -> Result<bool> {
        Ok(self.peek_value()? == b'n')
    }

    /// Skip one value, checking it exactly as strictly as parsing would.
    pub(crate) fn skip_value(&mut self) -> Result<()> {
        match self.peek_value()? {
            b'{' => {
                self.enter()?;
                self.pos += 1;
                let mut first = true;
                let mut keys = KeySet::default();
                while let Some(key) = self.next_key(&mut first)? {
                    keys.insert(key)?;
                    self.skip_value()?;
                }
                Ok(())
            }
            b'[' => {
                self.enter()?;
                self.pos += 1;
                let mut first = true;
                while self.next_element(&mut first)? {
                    self.skip_value()?;
                }
                Ok(())
            }
            b'"' => self.scan_string().map(drop),
            b't' => self.expect_literal(b"true"),
            b'f' => self.expect_literal(b"false"),
            b'n' => self.expect_literal(b"null"),
            b'-' | b'0'..=b'9' => {
                let num = self.scan_number()?;
                number_value(num).map(drop)
            }
            _ => Err(self.err_here("expected a JSON value")),
        }
    }

    /// Parse a free-form value (duplicate keys rejected at every level).
    pub(crate) fn parse_value(&mut self) -> Result<Value> {
        match self.peek_value()? {
            b'{' => {
                self.enter()?;
                self.pos += 1;
                let mut first = true;
                let mut map = Map::new();
                while let Some(key) = self.next_key(&mut first)? {
                    let value = self.parse_value().map_err(|e| e.at(&key))?;
                    if map.contains_key(key.as_ref()) {
                        return Err(ProtocolError::duplicate_key(&key));
                    }
                    map.insert(key.into_owned(), value);
                }
                Ok(Value::Object(map))
            }
            b'[' => {
                self.enter()?;
                self.pos += 1;
                let mut first = true;
                let mut items = Vec::new();
                while self.next_element(&mut first)? {
                    let index = items.len();
                    items.push(self.parse_value().map_err(|e| e.at_index(index))?);
                }
                Ok(Value::Array(items))
            }
            b'"' => Ok(Value::String(self.scan_string()?.into_owned())),
            b't' => self.expect_literal(b"true").map(|()| Value::Bool(true)),
            b'f' => self.expect_literal(b"false").map(|()| Value::Bool(false)),
            b'n' => self.expect_literal(b"null").map(|()| Value::Null),
            b'-' | b'0'..=b'9' => {
                let num = self.scan_number()?;
                number_value(num).map(Value::Number)
            }
            _ => Err(self.err_here("expected a JSON value")),
        }
    }
}

/// Keys seen in one object, for duplicate detection without quadratic cost.
#[derive(Default)]
struct KeySet<'a> {
    small: Vec<Cow<'a, str>>,
    large: std::collections::HashSet<Cow<'a, str>>,
}

impl<'a> KeySet<'a> {
    const SMALL: usize = 16;

    fn insert(&mut self, key: Cow<'a, str>) -> Result<()> {
        let duplicate = if self.large.is_empty() && self.small.len() < Self::SMALL {
            if self.small.contains(&key) {
                true
            } else {
                self.small.push(key.clone());
                false
            }
        } else {
            if self.large.is_empty() {
                self.large.extend(self.small.drain(..));
            }
            !self.large.insert(key.clone())
        };
        if duplicate {
            Err(ProtocolError::duplicate_key(&key))
        } else {
            Ok(())
        }
    }
}
