//! Conversions between Lua values and JSON.
//!
//! [`to_json`] reads a value the guest returned, with raw access only (no
//! metamethod runs, no guest code executes) and within Quirl's return-shape
//! bounds. The mapping:
//! - `nil` (top level) and the null light userdata become `null`;
//! - booleans, integers and finite floats map to JSON booleans and numbers
//!   (integers stay integers, floats stay floats: `2.0` is written `2.0`);
//! - strings must be UTF-8;
//! - a table whose keys are all strings is an object (an empty table is
//!   `{}`), a table whose keys are all integers `1..=4096` is an array
//!   (missing indices become `null`);
//! - everything else (functions, threads, userdata, NaN and infinities,
//!   other keys, tables that mix array indices and string keys, cycles and
//!   tables reached twice) is an error.
//!
//! [`to_lua`] builds fresh plain tables from JSON (`null` becomes the null
//! light userdata, as mlua's serializer does), so guest code never receives
//! a shared or protected table.

use crate::error::{Label, OpError};
use mlua::{Lua, Table, Value};
use quirl_lua_protocol::limits::JSON_DEPTH_MAX;
use serde_json::{Map, Number, Value as Json};
use std::collections::HashSet;
use std::ffi::c_void;

/// Bounds on a Lua value crossing into Rust.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Keys and values visited, counting the root.
    pub nodes: usize,
    /// Table nesting; a table at this depth is refused.
    pub depth: usize,
    /// UTF-8 bytes in strings, keys included.
    pub bytes: usize,
    /// Largest array index.
    pub index_max: i64,
}

/// Worker-only (Quirl's SDK conversion; DESIGN §15.10): the bounds for values
/// returned by scripts and callbacks.
pub const RETURN_SHAPE: Shape = Shape {
    nodes: 4_112,
    depth: 16,
    bytes: 256 * 1024,
    index_max: 4_096,
};

/// Worker-only (Quirl's SDK conversion; DESIGN §15.10): the bounds for
/// registration tables passed to the SDK.
pub const REGISTRATION_SHAPE: Shape = Shape {
    nodes: 512,
    depth: 4,
    bytes: 64 * 1024,
    index_max: 4_096,
};

struct Walk<'a> {
    shape: &'a Shape,
    what: &'a str,
    nodes: usize,
    bytes: usize,
    seen: HashSet<*const c_void>,
}

/// A value of a type JSON cannot carry.
pub fn unsupported(what: &str, detail: impl Into<String>) -> OpError {
    OpError::validation(format!("{what} is not JSON-compatible: {}", detail.into()))
        .with_label(Label {
            source: Some(what.to_owned()),
            start: 0,
            end: 0,
            message: "schema mismatch".to_owned(),
        })
        .with_help("Return nil, booleans, numbers, UTF-8 strings and tables of those")
}

/// A value over one of the shape bounds.
pub fn shape_limit(what: &str, kind: &str, observed: usize, limit: usize) -> OpError {
    OpError::resource_limit(format!("{what} exceeded its configured shape limit"))
        .with_context("lua failure: returned shape")
        .with_context(format!("{kind}: {observed}; limit: {limit}"))
        .with_help("Return a smaller, shallower typed value")
}

impl Walk<'_> {
    fn node(&mut self) -> Result<(), OpError> {
        self.nodes += 1;
        if self.nodes > self.shape.nodes {
            return Err(shape_limit(
                self.what,
                "nodes",
                self.nodes,
                self.shape.nodes,
            ));
        }
        Ok(())
    }

    fn text(&mut self, bytes: &[u8]) -> Result<String, OpError> {
        self.bytes = self.bytes.saturating_add(bytes.len());
        if self.bytes > self.shape.bytes {
            return Err(shape_limit(
                self.what,
                "retained bytes",
                self.bytes,
                self.shape.bytes,
            ));
        }
        String::from_utf8(bytes.to_vec())
            .map_err(|_| unsupported(self.what, "a string is not valid UTF-8"))
    }

    fn value(&mut self, value: &Value, depth: usize) -> Result<Json, OpError> {
        match value {
            Value::Nil => Ok(Json::Null),
            Value::LightUserData(data) if data.0.is_null() => Ok(Json::Null),
            Value::Boolean(b) => Ok(Json::Bool(*b)),
            Value::Integer(i) => Ok(Json::from(*i)),
            Value::Number(n) => Number::from_f64(*n)
                .map(Json::Number)
                .ok_or_else(|| unsupported(self.what, format!("the number {n} is not finite"))),
            Value::String(s) => Ok(Json::String(self.text(&s.as_bytes())?)),
            Value::Table(table) => self.table(table, depth),
            other => Err(unsupported(
                self.what,
                format!("it contains a Lua {}", other.type_name()),
            )),
        }
    }

    fn table(&mut self, table: &Table, depth: usize) -> Result<Json, OpError> {
        if depth >= self.shape.depth {
            return Err(shape_limit(self.what, "depth", depth + 1, self.shape.depth));
        }
        if !self.seen.insert(table.to_pointer()) {
            return Err(unsupported(
                self.what,
                "it contains a cyclic or repeated table",
            ));
        }
        let mut object = Map::new();
        let mut items: Vec<(i64, Json)> = Vec::new();
        for pair in table.pairs::<Value, Value>() {
            let (key, value) = pair.map_err(|e| unsupported(self.what, e.to_string()))?;
            self.node()?;
            self.node()?;
            match key {
                Value::String(key) => {
                    let key = self.text(&key.as_bytes())?;
                    let value = self.value(&value, depth + 1)?;
                    object.insert(key, value);
                }
                Value::Integer(index) if (1..=self.shape.index_max).contains(&index) => {
                    let value = self.value(&value, depth + 1)?;
                    items.push((index, value));
                }
                _ => {
                    return Err(unsupported(
                        self.what,
                        "tables need string keys or integer keys from 1 to 4096",
                    ));
                }
            }
            if !object.is_empty() && !items.is_empty() {
                return Err(unsupported(
                    self.what,
                    "a table mixes array indices and string keys",
                ));
            }
        }
        if items.is_empty() {
            return Ok(Json::Object(sorted(object)));
        }
        items.sort_unstable_by_key(|(index, _)| *index);
        let len = items.last().map_or(0, |(index, _)| *index) as usize;
        for _ in items.len()..len {
            self.node()?;
        }
        let mut array = vec![Json::Null; len];
        for (index, value) in items {
            array[(index - 1) as usize] = value;
        }
        Ok(Json::Array(array))
    }
}

/// Convert a value the guest produced into JSON within `shape`. `what` names
/// the value in diagnostics ("eval result", "prompt segment `x`", …).
pub fn to_json(value: &Value, shape: &Shape, what: &str) -> Result<Json, OpError> {
    let mut walk = Walk {
        shape,
        what,
        nodes: 1,
        bytes: 0,
        seen: HashSet::new(),
    };
    walk.value(value, 0)
}

/// Rebuild `map` with its keys in sorted order, so the object serializes
/// sorted whichever map type serde_json was built with.
pub fn sorted(map: Map<String, Json>) -> Map<String, Json> {
    let mut entries: Vec<(String, Json)> = map.into_iter().collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries.into_iter().collect()
}

/// Sort the keys of every object in `value`, recursively.
pub fn sort_keys(value: Json) -> Json {
    match value {
        Json::Object(map) => Json::Object(sorted(
            map.into_iter().map(|(k, v)| (k, sort_keys(v))).collect(),
        )),
        Json::Array(items) => Json::Array(items.into_iter().map(sort_keys).collect()),
        other => other,
    }
}

/// Build a Lua value from JSON, at most the protocol's
/// [`JSON_DEPTH_MAX`] deep (no value that arrived in a frame is deeper).
pub fn to_lua(lua: &Lua, value: &Json) -> mlua::Result<Value> {
    to_lua_at(lua, value, 0)
}

fn to_lua_at(lua: &Lua, value: &Json, depth: usize) -> mlua::Result<Value> {
    if depth > JSON_DEPTH_MAX {
        return Err(mlua::Error::runtime("JSON value is nested too deeply"));
    }
    Ok(match value {
        Json::Null => Value::NULL,
        Json::Bool(b) => Value::Boolean(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::String(lua.create_string(s)?),
        Json::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (index, item) in items.iter().enumerate() {
                table.raw_set(index + 1, to_lua_at(lua, item, depth + 1)?)?;
            }
            Value::Table(table)
        }
        Json::Object(map) => {
            let table = lua.create_table_with_capacity(0, map.len())?;
            for (key, item) in map {
                table.raw_set(key.as_str(), to_lua_at(lua, item, depth + 1)?)?;
            }
            Value::Table(table)
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn eval(lua: &Lua, source: &str) -> Result<Json, OpError> {
        let value: Value = lua.load(source).eval().unwrap();
        to_json(&value, &RETURN_SHAPE, "eval result")
    }

    #[test]
    fn converts_scalars_arrays_and_objects() {
        let lua = Lua::new();
        assert_eq!(eval(&lua, "return 42").unwrap(), json!(42));
        assert_eq!(eval(&lua, "return 2.5").unwrap(), json!(2.5));
        assert_eq!(eval(&lua, "return nil").unwrap(), json!(null));
        assert_eq!(eval(&lua, "return {}").unwrap(), json!({}));
        assert_eq!(
            eval(&lua, "return {1, 'a', true}").unwrap(),
            json!([1, "a", true])
        );
        assert_eq!(
            eval(&lua, "return {[1]=1, [3]=3}").unwrap(),
            json!([1, null, 3])
        );
        assert_eq!(
            eval(&lua, "return {b = 1, a = {2}}").unwrap(),
            json!({"a": [2], "b": 1})
        );
    }

    #[test]
    fn floats_keep_their_float_representation() {
        let lua = Lua::new();
        assert_eq!(
            serde_json::to_string(&eval(&lua, "return 2.0").unwrap()).unwrap(),
            "2.0"
        );
    }

    #[test]
    fn rejects_values_json_cannot_carry() {
        let lua = Lua::new();
        for source in [
            "return print",
            "return 0/0",
            "return 1/0",
            "return {[0] = 1}",
            "return {[1.5] = 1}",
            "return {1, x = 2}",
            "return '\\255'",
            "local t = {} t.t = t return t",
            "local s = {} return {s, s}",
            "return coroutine.create(print)",
        ] {
            assert!(eval(&lua, source).is_err(), "{source} must be rejected");
        }
    }

    #[test]
    fn enforces_the_return_shape_bounds() {
        let lua = Lua::new();
        let deep = format!("return {}1{}", "{".repeat(17), "}".repeat(17));
        assert_eq!(
            eval(&lua, &deep).unwrap_err().code,
            crate::error::ErrorCode::ResourceLimit
        );
        let wide = "local t = {} for i = 1, 3000 do t['k'..i] = i end return t";
        assert!(eval(&lua, wide).is_err());
        let big = "return string.rep('x', 300000)";
        assert!(eval(&lua, big).is_err());
        assert!(eval(&lua, "return {[4097] = 1}").is_err());
    }

    #[test]
    fn metamethods_do_not_run_during_conversion() {
        let lua = Lua::new();
        let value = eval(
            &lua,
            "return setmetatable({}, {__pairs = function() error('ran') end, __index = function() error('ran') end})",
        )
        .unwrap();
        assert_eq!(value, json!({}));
    }

    #[test]
    fn json_round_trips_through_lua() {
        let lua = Lua::new();
        let input = json!({"a": [1, 2.5, "x", null, {"b": false}], "c": {}});
        let value = to_lua(&lua, &input).unwrap();
        let back = to_json(&value, &RETURN_SHAPE, "round trip").unwrap();
        assert_eq!(back, input);
    }
}
