//! Strict JSON: a single-pass pull parser and typed extraction.
//!
//! This module is the only place that reads JSON text. It accepts exactly
//! one RFC 8259 value in UTF-8 without a byte order mark, with nothing before
//! or after it (not even whitespace), no duplicate keys at any level, no
//! raw control characters, no lone surrogate escapes, and at most
//! [`JSON_DEPTH_MAX`] levels of nesting. Numbers keep their exact textual
//! class, so a field declared as an integer accepts only integer literals in
//! its width (`1.0`, `1e3`, `-0` are not integers here).
//!
//! Records are extracted straight from the token stream, without an
//! intermediate tree; only free-form values become [`serde_json::Value`].
//! A tagged object whose tag is not its first key is scanned once for the
//! tag and then parsed; canonical frames (tag first) are read in one pass.
//! The extra scan is bounded by the frame size times the nesting depth,
//! which the frame and depth limits cap.
//! It is not a general JSON library: it has no serializer (the encoder uses
//! serde) and no lenient mode.

use crate::error::{ErrorKind, ProtocolError};
use crate::limits::JSON_DEPTH_MAX;
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;

type Result<T> = std::result::Result<T, ProtocolError>;

/// Check the payload-level rules (no BOM, valid UTF-8) and return its text.
pub(crate) fn payload_text(payload: &[u8]) -> Result<&str> {
    if payload.starts_with(&[0xEF, 0xBB, 0xBF]) {
        return Err(ProtocolError::new(
            ErrorKind::ByteOrderMark,
            "payload starts with a UTF-8 byte order mark",
        ));
    }
    std::str::from_utf8(payload).map_err(|error| {
        ProtocolError::new(ErrorKind::InvalidUtf8, "payload is not valid UTF-8")
            .with_context(format!("byte offset {}", error.valid_up_to()))
    })
}

/// Decode one complete JSON document into `T`, strictly.
pub(crate) fn decode_document<T: Decode>(payload: &[u8]) -> Result<T> {
    let text = payload_text(payload)?;
    let mut parser = Parser::new(text)?;
    let value = T::decode(&mut parser)?;
    parser.finish()?;
    Ok(value)
}

/// The class of a JSON number token.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Num<'a> {
    /// An integer literal without sign that fits u64.
    Unsigned(u64),
    /// A negative integer literal that fits i64 (never zero).
    Negative(i64),
    /// `-0` (serde_json reads it as a float).
    NegativeZero,
    /// An integer literal outside u64 / i64.
    BigInteger(&'a str),
    /// A literal with a fraction or an exponent.
    Float(&'a str),
}

/// Strict pull parser over validated UTF-8 text.
pub(crate) struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
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
    pub(crate) fn new(text: &'a str) -> Result<Self> {
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
        })
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

    fn err_here(&self, message: &str) -> ProtocolError {
        ProtocolError::malformed(message.to_owned())
            .with_context(format!("byte offset {}", self.pos))
    }

    #[inline]
    fn skip_ws(&mut self) {
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
    fn peek_value(&mut self) -> Result<u8> {
        self.peek()
            .ok_or_else(|| self.err_here("unexpected end of JSON input"))
    }

    /// Report `expected` against the value that stands here.
    ///
    /// The value is checked for well-formedness first, so a malformed value
    /// is reported as malformed rather than as the wrong type.
    fn type_error(&mut self, expected: &str) -> ProtocolError {
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

    fn expect_literal(&mut self, literal: &'static [u8]) -> Result<()> {
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

    /// Parse a string value.
    pub(crate) fn parse_string(&mut self) -> Result<Cow<'a, str>> {
        if self.peek_value()? != b'"' {
            return Err(self.type_error("a string"));
        }
        self.scan_string()
    }

    /// Parse a string value into an owned `String`.
    pub(crate) fn parse_owned_string(&mut self) -> Result<String> {
        self.parse_string().map(Cow::into_owned)
    }

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

    /// Parse an unsigned integer of at most `max`, naming `width` in errors.
    pub(crate) fn parse_unsigned(&mut self, max: u64, width: &str) -> Result<u64> {
        match self.peek_value()? {
            b'-' | b'0'..=b'9' => {}
            _ => return Err(self.type_error(width)),
        }
        match self.scan_number()? {
            Num::Unsigned(value) if value <= max => Ok(value),
            Num::Unsigned(_) | Num::Negative(_) | Num::BigInteger(_) => {
                Err(ProtocolError::out_of_range(width))
            }
            Num::NegativeZero | Num::Float(_) => {
                Err(ProtocolError::wrong_type(width, "a non-integer number"))
            }
        }
    }

    /// Parse a signed integer within `min..=max`, naming `width` in errors.
    pub(crate) fn parse_signed(&mut self, min: i64, max: i64, width: &str) -> Result<i64> {
        match self.peek_value()? {
            b'-' | b'0'..=b'9' => {}
            _ => return Err(self.type_error(width)),
        }
        let value = match self.scan_number()? {
            Num::Unsigned(value) => i64::try_from(value).ok(),
            Num::Negative(value) => Some(value),
            Num::BigInteger(_) => None,
            Num::NegativeZero | Num::Float(_) => {
                return Err(ProtocolError::wrong_type(width, "a non-integer number"));
            }
        };
        match value {
            Some(value) if (min..=max).contains(&value) => Ok(value),
            _ => Err(ProtocolError::out_of_range(width)),
        }
    }

    fn scan_digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(byte) = self.bytes.get(self.pos) {
            if byte.is_ascii_digit() {
                self.pos += 1;
            } else {
                break;
            }
        }
        self.pos - start
    }

    fn scan_number(&mut self) -> Result<Num<'a>> {
        let start = self.pos;
        let negative = self.bytes[self.pos] == b'-';
        if negative {
            self.pos += 1;
        }
        let int_start = self.pos;
        match self.bytes.get(self.pos) {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.scan_digits();
            }
            _ => return Err(self.err_here("invalid number")),
        }
        let int_end = self.pos;
        let mut float = false;
        if self.bytes.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            if self.scan_digits() == 0 {
                return Err(self.err_here("invalid number: no digit after `.`"));
            }
            float = true;
        }
        if matches!(self.bytes.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.bytes.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.scan_digits() == 0 {
                return Err(self.err_here("invalid number: no digit in exponent"));
            }
            float = true;
        }
        let literal = &self.text[start..self.pos];
        if float {
            return Ok(Num::Float(literal));
        }
        let mut magnitude: u64 = 0;
        for &digit in &self.bytes[int_start..int_end] {
            match magnitude
                .checked_mul(10)
                .and_then(|value| value.checked_add(u64::from(digit - b'0')))
            {
                Some(value) => magnitude = value,
                None => return Ok(Num::BigInteger(literal)),
            }
        }
        if !negative {
            return Ok(Num::Unsigned(magnitude));
        }
        if magnitude == 0 {
            return Ok(Num::NegativeZero);
        }
        match 0_i64.checked_sub_unsigned(magnitude) {
            Some(value) => Ok(Num::Negative(value)),
            None => Ok(Num::BigInteger(literal)),
        }
    }

    /// Scan a string starting at `"`; returns its decoded text.
    fn scan_string(&mut self) -> Result<Cow<'a, str>> {
        self.pos += 1;
        let start = self.pos;
        // Fast path: no escapes.
        self.pos = skip_plain(self.bytes, self.pos);
        match self.bytes.get(self.pos) {
            None => return Err(self.err_here("unterminated string")),
            Some(b'"') => {
                let text = &self.text[start..self.pos];
                self.pos += 1;
                return Ok(Cow::Borrowed(text));
            }
            Some(b'\\') => {}
            Some(_) => return Err(self.err_here("raw control character in a string")),
        }
        let mut owned = String::with_capacity(self.pos - start + 16);
        owned.push_str(&self.text[start..self.pos]);
        loop {
            let run = self.pos;
            self.pos = skip_plain(self.bytes, self.pos);
            owned.push_str(&self.text[run..self.pos]);
            match self.bytes.get(self.pos) {
                None => return Err(self.err_here("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(Cow::Owned(owned));
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.scan_escape(&mut owned)?;
                }
                Some(_) => return Err(self.err_here("raw control character in a string")),
            }
        }
    }

    fn scan_hex4(&mut self) -> Result<u32> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.err_here("truncated \\u escape"))?;
        let mut value = 0_u32;
        for &digit in digits {
            let nibble = match digit {
                b'0'..=b'9' => digit - b'0',
                b'a'..=b'f' => digit - b'a' + 10,
                b'A'..=b'F' => digit - b'A' + 10,
                _ => return Err(self.err_here("invalid \\u escape")),
            };
            value = value * 16 + u32::from(nibble);
        }
        self.pos += 4;
        Ok(value)
    }

    fn lone_surrogate(&self) -> ProtocolError {
        ProtocolError::new(
            ErrorKind::InvalidUtf8,
            "a \\u escape denotes a lone surrogate, which is not Unicode text",
        )
        .with_context(format!("byte offset {}", self.pos))
    }

    fn scan_escape(&mut self, out: &mut String) -> Result<()> {
        let Some(&byte) = self.bytes.get(self.pos) else {
            return Err(self.err_here("unterminated escape"));
        };
        self.pos += 1;
        let decoded = match byte {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.scan_hex4()?;
                match unit {
                    0xD800..=0xDBFF => {
                        if self.bytes.get(self.pos..self.pos + 2) != Some(b"\\u") {
                            return Err(self.lone_surrogate());
                        }
                        self.pos += 2;
                        let low = self.scan_hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return Err(self.lone_surrogate());
                        }
                        let scalar = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                        char::from_u32(scalar).ok_or_else(|| self.lone_surrogate())?
                    }
                    0xDC00..=0xDFFF => return Err(self.lone_surrogate()),
                    _ => char::from_u32(unit).ok_or_else(|| self.lone_surrogate())?,
                }
            }
            _ => return Err(self.err_here("invalid escape")),
        };
        out.push(decoded);
        Ok(())
    }

    // ----- whole values -----------------------------------------------------

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

    // ----- tagged enums -------------------------------------------------------

    /// Open an internally or adjacently tagged object and read its tag.
    ///
    /// Returns the tag and whether it was consumed (it was the first key).
    /// When the tag is not first, the object is scanned for it and the
    /// parser is rewound to just after `{`, so the caller's field loop sees
    /// every key again (and must skip the tag once).
    pub(crate) fn begin_tagged(&mut self, record: &str, tag: &str) -> Result<(Cow<'a, str>, bool)> {
        self.begin_object(record)?;
        let after_brace = self.pos;
        let depth = self.depth;
        let mut first = true;
        match self.next_key(&mut first)? {
            None => return Err(ProtocolError::missing_tag(tag, record)),
            Some(key) if key == tag => {
                let value = self.parse_string().map_err(|e| e.at(tag))?;
                return Ok((value, true));
            }
            Some(_) => {}
        }
        self.pos = after_brace;
        let mut first = true;
        let mut found = None;
        while let Some(key) = self.next_key(&mut first)? {
            if key == tag {
                if found.is_some() {
                    return Err(ProtocolError::duplicate_key(tag));
                }
                found = Some(self.parse_string().map_err(|e| e.at(tag))?);
            } else {
                self.skip_value()?;
            }
        }
        let found = found.ok_or_else(|| ProtocolError::missing_tag(tag, record))?;
        self.pos = after_brace;
        self.depth = depth;
        Ok((found, false))
    }
}

impl<'a> Parser<'a> {
    /// Decode an adjacently tagged enum: `{tag: name, content: value}`.
    ///
    /// Variants without content (`has_content` false) must not carry the
    /// content key. Either key may come first.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn decode_adjacent<K: Copy, T>(
        &mut self,
        record: &str,
        tag: &str,
        content: &str,
        kind_of: impl Fn(&str) -> Option<K>,
        has_content: impl Fn(K) -> bool,
        decode_content: impl Fn(K, &mut Parser<'a>) -> Result<T>,
        unit: impl Fn(K) -> T,
    ) -> Result<T> {
        let (name, mut tag_seen) = self.begin_tagged(record, tag)?;
        let kind =
            kind_of(&name).ok_or_else(|| ProtocolError::unknown_variant(&name, record).at(tag))?;
        let with_content = has_content(kind);
        let mut first = !tag_seen;
        let mut value = None;
        while let Some(key) = self.next_key(&mut first)? {
            if key == tag {
                if tag_seen {
                    return Err(ProtocolError::duplicate_key(&key));
                }
                tag_seen = true;
                self.parse_string()?;
            } else if key == content && with_content {
                if value.is_some() {
                    return Err(ProtocolError::duplicate_key(&key));
                }
                value = Some(decode_content(kind, self).map_err(|e| e.at(content))?);
            } else {
                return Err(ProtocolError::unknown_field(
                    &key,
                    &format!("{record} `{name}`"),
                ));
            }
        }
        if !with_content {
            return Ok(unit(kind));
        }
        value.ok_or_else(|| ProtocolError::missing_field(content, &format!("{record} `{name}`")))
    }
}

/// Whether a byte ends a run of plain string bytes (`"`, `\\` or a control character).
#[inline]
const fn is_special(byte: u8) -> bool {
    byte == b'"' || byte == b'\\' || byte < 0x20
}

/// Index of the first special string byte at or after `from`, or `bytes.len()`.
///
/// Looks at eight bytes at a time: for each of the three tests the lowest
/// flagged byte of a word is exact (borrows only run upwards), so the
/// lowest flag of their union is the first special byte.
#[inline]
fn skip_plain(bytes: &[u8], mut from: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = bytes.get(from..from + 8) {
        let mut word = [0_u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let quote = word ^ (ONES * u64::from(b'"'));
        let backslash = word ^ (ONES * u64::from(b'\\'));
        let flags = ((quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (word.wrapping_sub(ONES * 0x20) & !word))
            & HIGH;
        if flags != 0 {
            return from + (flags.trailing_zeros() / 8) as usize;
        }
        from += 8;
    }
    while let Some(&byte) = bytes.get(from) {
        if is_special(byte) {
            break;
        }
        from += 1;
    }
    from
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

/// Convert a number token into a free-form JSON number, as serde_json would.
fn number_value(num: Num<'_>) -> Result<Number> {
    match num {
        Num::Unsigned(value) => Ok(Number::from(value)),
        Num::Negative(value) => Ok(Number::from(value)),
        Num::NegativeZero => {
            Number::from_f64(-0.0).ok_or_else(|| ProtocolError::malformed("number out of range"))
        }
        Num::BigInteger(text) | Num::Float(text) => text
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .ok_or_else(|| ProtocolError::malformed(format!("number `{text}` is out of range"))),
    }
}

/// Typed extraction from the strict parser.
pub(crate) trait Decode: Sized {
    fn decode(parser: &mut Parser<'_>) -> Result<Self>;
}

/// Domain validation run after a record's fields are extracted.
pub(crate) trait Validate {
    fn validate(&self) -> Result<()> {
        Ok(())
    }
}

impl Decode for bool {
    fn decode(parser: &mut Parser<'_>) -> Result<Self> {
        parser.parse_bool()
    }
}

impl Decode for u8 {
    fn decode(parser: &mut Parser<'_>) -> Result<Self> {
        parser
            .parse_unsigned(u64::from(u8::MAX), "a byte (0..=255)")
            .map(|value| value as u8)
    }
}

impl Decode for u16 {
    fn decode(parser: &mut Parser<'_>) -> Result<Self> {
        parser
            .parse_unsigned(u64::from(u16::MAX), "u16")
            .map(|value| value as u16)
    }
}

impl Decode for u32 {
    fn decode(parser: &mut Parser<'_>) -> Result<Self> {
        parser
            .parse_unsigned(u64::from(u32::MAX), "u32")
            .map(|value| value as u32)
    }
}

impl Decode for u64 {
    fn decode(parser: &mut Parser<'_>) -> Result<Self> {
        parser.parse_unsigned(u64::MAX, "u64")
    }
}

impl Decode for i32 {
    fn decode(parser: &mut Parser<'_>) -> Result<Self> {
        parser
            .parse_signed(i64::from(i32::MIN), i64::from(i32::MAX), "i32")
            .map(|value| value as i32)
    }
}

impl Decode for i64 {
    fn decode(parser: &mut Parser<'_>) -> Result<Self> {
        parser.parse_signed(i64::MIN, i64::MAX, "i64")
    }
}

impl Decode for String {
    fn decode(parser: &mut Parser<'_>) -> Result<Self> {
        parser.parse_owned_string()
    }
}

impl Decode for Value {
    fn decode(parser: &mut Parser<'_>) -> Result<Self> {
        parser.parse_value()
    }
}

impl<T: Decode> Decode for Vec<T> {
    fn decode(parser: &mut Parser<'_>) -> Result<Self> {
        parser.begin_array()?;
        let mut first = true;
        let mut items = Vec::new();
        while parser.next_element(&mut first)? {
            let index = items.len();
            items.push(T::decode(parser).map_err(|e| e.at_index(index))?);
        }
        Ok(items)
    }
}

/// `null` or a value: for optional fields that are always present on the wire.
impl<T: Decode> Decode for Option<T> {
    fn decode(parser: &mut Parser<'_>) -> Result<Self> {
        if parser.take_null()? {
            Ok(None)
        } else {
            T::decode(parser).map(Some)
        }
    }
}

impl<T: Decode> Decode for BTreeMap<String, T> {
    fn decode(parser: &mut Parser<'_>) -> Result<Self> {
        parser.begin_map()?;
        let mut first = true;
        let mut map = BTreeMap::new();
        while let Some(key) = parser.next_key(&mut first)? {
            let value = T::decode(parser).map_err(|e| e.at(&key))?;
            if map.contains_key(key.as_ref()) {
                return Err(ProtocolError::duplicate_key(&key));
            }
            map.insert(key.into_owned(), value);
        }
        Ok(map)
    }
}

/// Decode a field that is omitted when `None`: present means non-null.
pub(crate) fn decode_present<T: Decode>(parser: &mut Parser<'_>) -> Result<Option<T>> {
    if parser.at_null()? {
        return Err(ProtocolError::wrong_type(
            "a value (omit the field instead of null)",
            "null",
        ));
    }
    T::decode(parser).map(Some)
}

/// Generate [`Decode`] for a record (a JSON object with fixed fields).
///
/// Field modes: `req` — must be present (an `Option` field then accepts
/// `null`); `omit` — an `Option` field that is absent when `None` and never
/// `null`.
macro_rules! decode_record {
    ($ty:ident $name:literal { $($field:ident : $mode:ident),* $(,)? }) => {
        impl $crate::json::Decode for $ty {
            fn decode(parser: &mut $crate::json::Parser<'_>) -> Result<Self, $crate::error::ProtocolError> {
                parser.begin_object($name)?;
                $( let mut $field = None; )*
                let mut first = true;
                while let Some(key) = parser.next_key(&mut first)? {
                    match key.as_ref() {
                        $( stringify!($field) => {
                            if $field.is_some() {
                                return Err($crate::error::ProtocolError::duplicate_key(&key));
                            }
                            $field = Some($crate::json::decode_record!(@decode $mode, parser)
                                .map_err(|e| e.at(stringify!($field)))?);
                        } )*
                        _ => return Err($crate::error::ProtocolError::unknown_field(&key, $name)),
                    }
                }
                let value = Self {
                    $( $field: $crate::json::decode_record!(@finish $mode, $field, $name)?, )*
                };
                $crate::json::Validate::validate(&value)?;
                Ok(value)
            }
        }
    };
    (@decode req, $parser:ident) => { $crate::json::Decode::decode($parser) };
    (@decode omit, $parser:ident) => { $crate::json::decode_present($parser) };
    (@finish req, $field:ident, $name:expr) => {
        $field.ok_or_else(|| $crate::error::ProtocolError::missing_field(stringify!($field), $name))
    };
    (@finish omit, $field:ident, $name:expr) => {
        Ok::<_, $crate::error::ProtocolError>($field.unwrap_or(None))
    };
}
pub(crate) use decode_record;

/// Generate [`Decode`] for an internally tagged enum of struct and unit variants.
macro_rules! decode_tagged {
    ($ty:ident $name:literal, tag = $tag:literal {
        $( $vname:literal => $variant:ident { $($field:ident : $mode:ident),* $(,)? } ),* $(,)?
    }) => {
        impl $crate::json::Decode for $ty {
            fn decode(parser: &mut $crate::json::Parser<'_>) -> Result<Self, $crate::error::ProtocolError> {
                let (tag, mut tag_seen) = parser.begin_tagged($name, $tag)?;
                let mut first = !tag_seen;
                let value = match tag.as_ref() {
                    $( $vname => {
                        const RECORD: &str = concat!($name, " `", $vname, "`");
                        $( let mut $field = None; )*
                        while let Some(key) = parser.next_key(&mut first)? {
                            match key.as_ref() {
                                $tag => {
                                    if tag_seen {
                                        return Err($crate::error::ProtocolError::duplicate_key(&key));
                                    }
                                    tag_seen = true;
                                    parser.parse_string()?;
                                }
                                $( stringify!($field) => {
                                    if $field.is_some() {
                                        return Err($crate::error::ProtocolError::duplicate_key(&key));
                                    }
                                    $field = Some($crate::json::decode_record!(@decode $mode, parser)
                                        .map_err(|e| e.at(stringify!($field)))?);
                                } )*
                                _ => return Err($crate::error::ProtocolError::unknown_field(&key, RECORD)),
                            }
                        }
                        let _ = tag_seen;
                        $ty::$variant {
                            $( $field: $crate::json::decode_record!(@finish $mode, $field, RECORD)?, )*
                        }
                    } )*
                    other => {
                        return Err($crate::error::ProtocolError::unknown_variant(other, $name)
                            .at($tag));
                    }
                };
                $crate::json::Validate::validate(&value)?;
                Ok(value)
            }
        }
    };
}
pub(crate) use decode_tagged;

/// Generate [`Decode`] and `as_str` for an enum encoded as a snake_case string.
macro_rules! string_enum {
    ($ty:ident $name:literal { $( $vname:literal => $variant:ident ),* $(,)? }) => {
        impl $crate::json::Decode for $ty {
            fn decode(parser: &mut $crate::json::Parser<'_>) -> Result<Self, $crate::error::ProtocolError> {
                let text = parser.parse_string()?;
                match text.as_ref() {
                    $( $vname => Ok($ty::$variant), )*
                    other => Err($crate::error::ProtocolError::unknown_variant(other, $name)),
                }
            }
        }

        impl $ty {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),*];

            /// The snake_case wire name.
            pub const fn as_str(self) -> &'static str {
                match self { $( $ty::$variant => $vname, )* }
            }
        }
    };
}
pub(crate) use string_enum;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn parse(text: &str) -> Result<Value> {
        decode_document::<Value>(text.as_bytes())
    }

    #[test]
    fn skip_plain_finds_the_first_special_byte_anywhere() {
        for len in 0..20 {
            for at in 0..=len {
                for special in [b'"', b'\\', 0x00, 0x1f] {
                    let mut bytes = vec![b'a'; len];
                    bytes.extend_from_slice("é\u{7f}\u{80}".as_bytes());
                    if at < len {
                        bytes[at] = special;
                    }
                    let expected = bytes
                        .iter()
                        .position(|&b| is_special(b))
                        .unwrap_or(bytes.len());
                    assert_eq!(skip_plain(&bytes, 0), expected, "{len} {at} {special}");
                }
            }
        }
    }

    #[test]
    fn depth_limit_matches_serde_json() {
        let ok = format!(
            "{}{}",
            "[".repeat(JSON_DEPTH_MAX),
            "]".repeat(JSON_DEPTH_MAX)
        );
        assert!(parse(&ok).is_ok());
        assert!(serde_json::from_str::<Value>(&ok).is_ok());
        let deep = format!(
            "{}{}",
            "[".repeat(JSON_DEPTH_MAX + 1),
            "]".repeat(JSON_DEPTH_MAX + 1)
        );
        assert_eq!(parse(&deep).unwrap_err().kind(), ErrorKind::DepthExceeded);
        assert!(serde_json::from_str::<Value>(&deep).is_err());
    }

    #[test]
    fn free_form_numbers_follow_serde_json() {
        for text in ["0", "-1", "1.5", "-0", "1e3", "18446744073709551616", "0.1"] {
            let ours = parse(text).unwrap();
            let theirs: Value = serde_json::from_str(text).unwrap();
            assert_eq!(
                serde_json::to_string(&ours).unwrap(),
                serde_json::to_string(&theirs).unwrap(),
                "{text}"
            );
        }
        assert_eq!(parse("1e400").unwrap_err().kind(), ErrorKind::MalformedJson);
    }

    #[test]
    fn strings_decode_escapes_and_reject_lone_surrogates() {
        assert_eq!(
            parse(r#""a\u00e9\ud83d\ude00\n\"""#).unwrap(),
            Value::String("aé😀\n\"".to_owned())
        );
        for bad in [r#""\ud800""#, r#""\udc00""#, r#""\ud800\u0041""#] {
            assert_eq!(
                parse(bad).unwrap_err().kind(),
                ErrorKind::InvalidUtf8,
                "{bad}"
            );
        }
        assert_eq!(
            parse("\"a\u{1}\"").unwrap_err().kind(),
            ErrorKind::MalformedJson
        );
    }
}
