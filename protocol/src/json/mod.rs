//! Strict JSON (SPEC §5): a single-pass pull parser and typed extraction.
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
//! serde). Its one other mode, [`Mode::Host`], is for a host's own JSON of
//! a record (`records::StrictDecode`): the same rules, except that members
//! a host's serde skips when empty may be absent.
//!
//! This file holds the document entry points (SPEC §5.1 payload rules,
//! §5.2 exactly one value). The parts:
//!
//! - `parser`: the pull parser's structure — objects, arrays, keys,
//!   literals, whole values, depth (§5.2–§5.5);
//! - `string`: string tokens and escapes (§5.1);
//! - `number`: number tokens and integer widths (§5.6, §5.7);
//! - `tagged`: tagged objects, tag in any position (§5.8, §5.9);
//! - `decode`: the [`Decode`] and [`Validate`] traits and their impls for
//!   primitive and container types;
//! - `macros`: `decode_record!`, `decode_tagged!` and `string_enum!`, which
//!   generate [`Decode`] for records and enums (§5.9).
//!
//! [`JSON_DEPTH_MAX`]: crate::limits::JSON_DEPTH_MAX

mod decode;
mod macros;
mod number;
mod parser;
mod string;
mod tagged;

pub(crate) use decode::{Decode, Validate, decode_present, omitted};
pub(crate) use macros::{decode_record, decode_tagged, string_enum};
pub(crate) use parser::{Mode, Parser};

use crate::error::{ErrorKind, ProtocolError};

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

/// Decode one complete JSON document into `T`, strictly (the wire's rules).
pub(crate) fn decode_document<T: Decode>(payload: &[u8]) -> Result<T> {
    decode_document_in(payload, Mode::Wire)
}

/// Decode one complete JSON document into `T` under `mode`.
pub(crate) fn decode_document_in<T: Decode>(payload: &[u8], mode: Mode) -> Result<T> {
    let text = payload_text(payload)?;
    let mut parser = Parser::new(text, mode)?;
    let value = T::decode(&mut parser)?;
    parser.finish()?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::limits::JSON_DEPTH_MAX;
    use serde_json::Value;

    fn parse(text: &str) -> Result<Value> {
        decode_document::<Value>(text.as_bytes())
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
