//! Typed reads of JSON converted from Lua tables.
//!
//! A Lua table has no separate "empty array": `{}` converts to the JSON
//! object `{}`. When a typed record expects a sequence, [`from_json`]
//! accepts an empty object as an empty sequence, which is what mlua's own
//! deserializer (used by Quirl) does with an empty table. Everything else is
//! serde_json's ordinary, strict behaviour (`deny_unknown_fields` included).

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess,
    Visitor,
};
use serde_json::{Map, Value};

/// Deserialize `T` from `value`, treating `{}` as an empty sequence where a
/// sequence is expected.
pub fn from_json<T: DeserializeOwned>(value: &Value) -> Result<T, serde_json::Error> {
    T::deserialize(Lenient(value))
}

#[derive(Clone, Copy)]
struct Lenient<'a>(&'a Value);

struct Seq<'a>(std::slice::Iter<'a, Value>);

struct Object<'a> {
    entries: serde_json::map::Iter<'a>,
    value: Option<&'a Value>,
}

impl<'de> SeqAccess<'de> for Seq<'de> {
    type Error = serde_json::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        self.0
            .next()
            .map(|value| seed.deserialize(Lenient(value)))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

impl<'de> MapAccess<'de> for Object<'de> {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        match self.entries.next() {
            Some((key, value)) => {
                self.value = Some(value);
                seed.deserialize(BorrowedStrDeserializer::new(key.as_str()))
                    .map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(Lenient(value)),
            None => Err(de::Error::custom("value requested before its key")),
        }
    }
}

fn object(map: &Map<String, Value>) -> Object<'_> {
    Object {
        entries: map.iter(),
        value: None,
    }
}

impl<'de> Deserializer<'de> for Lenient<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => visitor.visit_seq(Seq(items.iter())),
            Value::Object(map) => visitor.visit_map(object(map)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(items) => visitor.visit_seq(Seq(items.iter())),
            Value::Object(map) if map.is_empty() => visitor.visit_seq(Seq([].iter())),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct tuple tuple_struct map struct
        identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Record {
        names: Vec<String>,
        #[serde(default)]
        kind: Option<Kind>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        First,
    }

    #[test]
    fn an_empty_object_reads_as_an_empty_sequence() {
        let record: Record = from_json(&json!({"names": {}})).unwrap();
        assert!(record.names.is_empty());
    }

    #[test]
    fn unknown_fields_and_wrong_types_are_still_rejected() {
        assert!(from_json::<Record>(&json!({"names": [], "extra": 1})).is_err());
        assert!(from_json::<Record>(&json!({"names": {"a": "b"}})).is_err());
        assert!(from_json::<Record>(&json!({"names": [1]})).is_err());
        assert!(from_json::<Record>(&json!({"names": [], "kind": "second"})).is_err());
    }

    #[test]
    fn unit_variants_read_from_strings() {
        let record: Record = from_json(&json!({"names": ["a"], "kind": "first"})).unwrap();
        assert_eq!(record.kind, Some(Kind::First));
    }

    #[test]
    fn integers_do_not_read_from_floats() {
        #[derive(Debug, Deserialize)]
        struct N {
            #[allow(dead_code)]
            n: u64,
        }
        assert!(from_json::<N>(&json!({"n": 1.0})).is_err());
        assert!(from_json::<N>(&json!({"n": 1})).is_ok());
    }
}
