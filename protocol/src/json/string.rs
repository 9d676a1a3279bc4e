//! String tokens (SPEC §5.1): plain runs found eight bytes at a time,
//! escapes decoded, raw control characters and lone surrogates rejected.

use super::Result;
use super::parser::Parser;
use crate::error::{ErrorKind, ProtocolError};
use std::borrow::Cow;

impl<'a> Parser<'a> {
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

    /// Scan a string starting at `"`; returns its decoded text.
    pub(super) fn scan_string(&mut self) -> Result<Cow<'a, str>> {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

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
}
