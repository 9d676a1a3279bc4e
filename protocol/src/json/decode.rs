//! Typed extraction: the [`Decode`] trait (a type read straight from the
//! parser's tokens), the [`Validate`] hook for domain checks, and `Decode`
//! for the primitive and container types records are built from (integer
//! widths per SPEC §5.6, omitted-when-empty members per §5.9).

use super::Result;
use super::parser::Parser;
use crate::error::ProtocolError;
use serde_json::Value;
use std::collections::BTreeMap;

/// Typed extraction from the strict parser.
///
/// Nominally `pub` (the module is private): it is the supertrait of the
/// sealed trait behind the public `records::StrictDecode`, so that
/// `StrictDecode` can be implemented for `Vec<T>` and `Option<T>` of any
/// record.
pub trait Decode: Sized {
    /// Read one value of this type.
    fn decode(parser: &mut Parser<'_>) -> Result<Self>;

    /// The value of a member that a host's own JSON left out because it
    /// was empty or `None` (serde's `skip_serializing_if`): `Some` only for
    /// lists, maps and options. Never used on the wire (SPEC §5.9-c).
    fn omitted() -> Option<Self> {
        None
    }
}

/// The value of an absent member under the parser's mode: `Some` when the
/// document is a host's own JSON and the member's type has an empty value.
pub(crate) fn omitted<T: Decode>(parser: &Parser<'_>) -> Option<T> {
    if parser.fills_omitted() {
        T::omitted()
    } else {
        None
    }
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

    fn omitted() -> Option<Self> {
        Some(Vec::new())
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

    fn omitted() -> Option<Self> {
        Some(None)
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

    fn omitted() -> Option<Self> {
        Some(BTreeMap::new())
    }
}

/// Decode a field that is omitted when `None`: present means non-null on
/// the wire; a host's own JSON ([`Mode::Host`](super::Mode::Host)) may
/// also write the `None` as `null`.
pub(crate) fn decode_present<T: Decode>(parser: &mut Parser<'_>) -> Result<Option<T>> {
    if parser.fills_omitted() && parser.take_null()? {
        return Ok(None);
    }
    if parser.at_null()? {
        return Err(ProtocolError::wrong_type(
            "a value (omit the field instead of null)",
            "null",
        ));
    }
    T::decode(parser).map(Some)
}
