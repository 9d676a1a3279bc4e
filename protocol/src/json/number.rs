//! Number tokens: their exact textual class, integer widths (SPEC §5.6) and
//! free-form numbers read as serde_json reads them (§5.7).

use super::Result;
use super::parser::Parser;
use crate::error::ProtocolError;
use serde_json::Number;

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

impl<'a> Parser<'a> {
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

    pub(super) fn scan_number(&mut self) -> Result<Num<'a>> {
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
}

/// Convert a number token into a free-form JSON number, as serde_json would.
pub(super) fn number_value(num: Num<'_>) -> Result<Number> {
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
