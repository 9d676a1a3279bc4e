//! Case texts to bytes: the placeholders `${DESCRIPTOR}` and
//! `${REPEAT:N:TEXT}` in texts and values, and hex-encoded bytes.

use quirl_lua_protocol::LUA_WORKER_PROTOCOL_DESCRIPTOR;
use serde_json::Value;

/// Placeholder replaced by the protocol descriptor in case texts.
pub const DESCRIPTOR_PLACEHOLDER: &str = "${DESCRIPTOR}";

/// Expand `${REPEAT:N:TEXT}` (TEXT repeated N times; TEXT has no `}`), so
/// that case files can describe large inputs without holding them.
pub fn expand_repeats(text: &str) -> String {
    const OPEN: &str = "${REPEAT:";
    if !text.contains(OPEN) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        let parsed = after.split_once(':').and_then(|(count, tail)| {
            let count: usize = count.parse().ok()?;
            let (unit, tail) = tail.split_once('}')?;
            Some((count, unit, tail))
        });
        match parsed {
            Some((count, unit, tail)) => {
                out.push_str(&unit.repeat(count));
                rest = tail;
            }
            None => {
                out.push_str(OPEN);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Expand the placeholders (`${DESCRIPTOR}`, `${REPEAT:N:TEXT}`) of a text.
pub fn expand(text: &str) -> String {
    expand_repeats(&text.replace(DESCRIPTOR_PLACEHOLDER, LUA_WORKER_PROTOCOL_DESCRIPTOR))
}

/// Expand the placeholders in every string of a value.
pub fn substitute(value: &Value) -> Value {
    match value {
        Value::String(text) if text.contains("${") => Value::String(expand(text)),
        Value::Array(items) => Value::Array(items.iter().map(substitute).collect()),
        Value::Object(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| (k.clone(), substitute(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Decode a hex string (whitespace ignored).
pub fn hex(text: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!("odd number of hex digits in `{text}`"));
    }
    digits
        .chunks(2)
        .map(|pair| {
            let text = std::str::from_utf8(pair).map_err(|e| e.to_string())?;
            u8::from_str_radix(text, 16).map_err(|_| format!("bad hex `{text}`"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn hex_decodes_and_rejects_garbage() {
        assert_eq!(hex("00 01 ff").unwrap(), vec![0, 1, 255]);
        assert!(hex("0").is_err());
        assert!(hex("zz").is_err());
    }

    #[test]
    fn repeats_expand_and_malformed_ones_stay() {
        assert_eq!(expand_repeats("a${REPEAT:3:xy}b"), "axyxyxyb");
        assert_eq!(expand_repeats("${REPEAT:2:-}${REPEAT:0:z}"), "--");
        assert_eq!(expand_repeats("${REPEAT:x:y}"), "${REPEAT:x:y}");
        assert_eq!(expand_repeats("${REPEAT:2:open"), "${REPEAT:2:open");
    }

    #[test]
    fn substitute_replaces_the_descriptor_everywhere() {
        let value = substitute(&json!({"a": ["x${DESCRIPTOR}"]}));
        assert_eq!(value["a"][0], format!("x{LUA_WORKER_PROTOCOL_DESCRIPTOR}"));
    }
}
