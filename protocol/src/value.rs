//! Free-form JSON values: canonical encoding and bounds.
//!
//! Free-form values (`result`, callback `context`, `annotate_result`
//! values) are [`serde_json::Value`]s. Quirl builds them through
//! `serde_json::Value`, whose objects iterate in sorted key order, so the
//! canonical encoding writes object keys sorted by their UTF-8 bytes, at
//! every level, whatever map implementation `serde_json` was built with.

use crate::error::ProtocolError;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::Value;

/// Serializes a [`Value`] in canonical form (object keys sorted at every level).
#[derive(Debug, Clone, Copy)]
pub struct CanonicalValue<'a>(pub &'a Value);

impl Serialize for CanonicalValue<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&CanonicalValue(item))?;
                }
                seq.end()
            }
            Value::Object(map) => {
                // Without serde_json's `preserve_order` the map iterates in
                // sorted order already: check that without allocating, and
                // sort a copy of the entries only when it does not.
                let sorted = map.keys().zip(map.keys().skip(1)).all(|(a, b)| a < b);
                let mut out = serializer.serialize_map(Some(map.len()))?;
                if sorted {
                    for (key, value) in map {
                        out.serialize_entry(key, &CanonicalValue(value))?;
                    }
                } else {
                    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                    entries.sort_unstable_by(|left, right| left.0.cmp(right.0));
                    for (key, value) in entries {
                        out.serialize_entry(key, &CanonicalValue(value))?;
                    }
                }
                out.end()
            }
            scalar => scalar.serialize(serializer),
        }
    }
}

/// `serialize_with` helper for free-form fields.
pub(crate) fn serialize_canonical<S: Serializer>(
    value: &Value,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    CanonicalValue(value).serialize(serializer)
}

/// Encode a free-form value in canonical compact form.
pub fn encode_value(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail, and a Value holds no non-string keys.
    if serde_json::to_writer(&mut out, &CanonicalValue(value)).is_err() {
        out.clear();
    }
    out
}

/// Check nodes, depth (root = 0) and text bytes of a free-form value (`domain_bounds`).
pub(crate) fn check_bounds(
    value: &Value,
    nodes_max: usize,
    depth_max: usize,
    text_max: usize,
) -> Result<(), ProtocolError> {
    let mut stack = vec![(value, 0_usize)];
    let mut nodes = 0_usize;
    let mut text = 0_usize;
    while let Some((value, depth)) = stack.pop() {
        nodes += 1;
        if nodes > nodes_max {
            return Err(ProtocolError::domain(format!(
                "value has more than {nodes_max} nodes"
            )));
        }
        if depth > depth_max {
            return Err(ProtocolError::domain(format!(
                "value nests deeper than {depth_max}"
            )));
        }
        match value {
            Value::String(s) => text = text.saturating_add(s.len()),
            Value::Array(items) => stack.extend(items.iter().map(|item| (item, depth + 1))),
            Value::Object(map) => {
                for (key, item) in map {
                    text = text.saturating_add(key.len());
                    stack.push((item, depth + 1));
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
        if text > text_max {
            return Err(ProtocolError::domain(format!(
                "value holds more than {text_max} bytes of text"
            )));
        }
    }
    Ok(())
}

/// Whether `text` holds a character that could change terminal state: any
/// control character (C0, DEL, C1) other than newline and tab (Quirl's
/// `reject_terminal_controls`).
pub fn has_terminal_controls(text: &str) -> bool {
    text.chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\t'))
}

/// Check a free-form value that Quirl scans with
/// `reject_json_terminal_controls`: the annotation bounds (nodes, depth,
/// text), then no terminal control characters in any key or string
/// (`domain_bounds`). Public so that a peer building such a value (a
/// worker's `contribution` result or `annotate_result` action) checks it by
/// the same rule the codec applies.
pub fn check_terminal_safe(value: &Value) -> Result<(), ProtocolError> {
    check_bounds(
        value,
        crate::limits::ANNOTATION_NODES_MAX,
        crate::limits::ANNOTATION_DEPTH_MAX,
        crate::limits::ANNOTATION_TEXT_BYTES_MAX,
    )?;
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        let unsafe_text = match value {
            Value::String(text) => has_terminal_controls(text),
            Value::Array(items) => {
                stack.extend(items);
                false
            }
            Value::Object(map) => {
                stack.extend(map.values());
                map.keys().any(|key| has_terminal_controls(key))
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        };
        if unsafe_text {
            return Err(ProtocolError::domain(
                "value contains terminal control characters (only newline and tab are allowed)",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn canonical_encoding_sorts_keys_at_every_level() {
        let value: Value = serde_json::from_str(
            r#"{"b":[{"z":1,"a":{"y":null,"x":[]}}],"a":"\u00e9","\u00e9":{},"B":true}"#,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(encode_value(&value)).unwrap(),
            r#"{"B":true,"a":"é","b":[{"a":{"x":[],"y":null},"z":1}],"é":{}}"#
        );
    }
}
