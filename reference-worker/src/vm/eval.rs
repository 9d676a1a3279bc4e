//! Running guest source as one chunk: `eval` (expression first, then
//! block, with a one-entry cache of the compiled chunk) and `test` (every
//! `test_*` function, each with fresh budgets) (SPEC §7.1, DESIGN §15.10).

use super::{Vm, normalize_shebang, source_len};
use crate::convert::{RETURN_SHAPE, to_json};
use crate::diag::Chunk;
use crate::error::OpError;
use mlua::chunk::ChunkMode;
use mlua::{Function, Value};
use serde_json::Value as Json;

/// Longest `eval` source whose compiled chunk is kept for reuse. Keeps the
/// memory the cache retains inside the VM (and so inside the guest's
/// memory budget, which it is charged to) to a few KiB.
const EVAL_CACHE_SOURCE_BYTES_MAX: usize = 1024;

impl Vm {
    /// Quirl evaluates chunks as an expression first (`return <source>`),
    /// then as a block. A source that starts with the keyword `return`
    /// can never be an expression, so it skips the first attempt.
    fn compile_eval(&self, chunk: &Chunk) -> mlua::Result<Function> {
        let text = chunk.text.trim_start_matches([' ', '\t', '\n', '\r']);
        if text
            .strip_prefix("return")
            .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
        {
            return self.compile_block(chunk);
        }
        let expression = format!("return {}", chunk.text);
        match self
            .lua
            .load(expression.as_str())
            .set_name(chunk.lua_name())
            .set_mode(ChunkMode::Text)
            .into_function()
        {
            Ok(function) => Ok(function),
            Err(_) => self.compile_block(chunk),
        }
    }

    pub(super) fn evaluate(&self, chunk: &Chunk) -> Result<Value, OpError> {
        self.compile_eval(chunk)
            .and_then(|f| f.call::<Value>(()))
            .map_err(|e| self.fail(&e, Some(chunk)))
    }

    pub(super) fn eval(&mut self, source: String) -> Result<Json, OpError> {
        source_len(&source, "eval")?;
        let chunk = Chunk {
            name: "eval".to_owned(),
            text: source,
        };
        self.begin(self.policy_wall())?;
        let function = self
            .eval_function(&chunk)
            .map_err(|e| self.fail(&e, Some(&chunk)))?;
        let value = function
            .call::<Value>(())
            .map_err(|e| self.fail(&e, Some(&chunk)))?;
        to_json(&value, &RETURN_SHAPE, "eval result")
    }

    /// The compiled `eval` chunk for `chunk`, reused when the previous eval
    /// had exactly the same source.
    ///
    /// Running a kept main chunk again is the same as compiling it again:
    /// its only upvalue is `_ENV`, bound to the globals table at load time
    /// (which the VM never replaces), and each call gets fresh locals,
    /// varargs and closures (Lua 5.4 does not cache closures). A chunk can
    /// rebind its `_ENV` only by naming it (`debug` with `setupvalue` and
    /// `upvaluejoin` is not in the sandbox), so sources that contain
    /// `_ENV` are never kept. Compile errors are not kept. The kept
    /// function lives in the VM's own memory and so counts against the
    /// guest's memory budget; [`EVAL_CACHE_SOURCE_BYTES_MAX`] and the
    /// single entry bound it. Budgets are reset by `begin` before the call
    /// either way (compiling runs no instructions).
    fn eval_function(&mut self, chunk: &Chunk) -> mlua::Result<Function> {
        if let Some((source, function)) = &self.eval_cache
            && *source == chunk.text
        {
            return Ok(function.clone());
        }
        let function = self.compile_eval(chunk)?;
        if chunk.text.len() <= EVAL_CACHE_SOURCE_BYTES_MAX && !chunk.text.contains("_ENV") {
            self.eval_cache = Some((chunk.text.clone(), function.clone()));
        } else {
            self.eval_cache = None;
        }
        Ok(function)
    }

    pub(super) fn test(&mut self, source: &str, source_name: String) -> Result<Json, OpError> {
        source_len(source, &source_name)?;
        let chunk = Chunk {
            name: source_name,
            text: normalize_shebang(source),
        };
        self.begin(self.policy_wall())?;
        let Value::Table(module) = self.evaluate(&chunk)? else {
            return Err(OpError::lua("test module must return a table")
                .with_help("Return a table of `test_*` functions"));
        };
        let mut tests = Vec::new();
        for pair in module.pairs::<Value, Value>() {
            let (key, value) = pair.map_err(|e| self.fail(&e, Some(&chunk)))?;
            let Value::String(key) = key else {
                continue;
            };
            let Ok(name) = key.to_str().map(|s| s.to_owned()) else {
                continue;
            };
            if !name.starts_with("test_") {
                continue;
            }
            let Value::Function(test) = value else {
                return Err(OpError::schema(
                    &chunk.name,
                    format!("{name} must be a function"),
                ));
            };
            tests.push((name, test));
        }
        // DESIGN §15.6-b: the loop above copied a name per entry and the
        // sort compares names; one unit per test function and per
        // comparison the sort may make (n⌈log₂ n⌉), charged before it runs
        // (LOOPS.md, `vm/eval.rs`).
        let count = u64::try_from(tests.len()).unwrap_or(u64::MAX);
        let log2 = u64::from(count.max(1).next_power_of_two().trailing_zeros());
        self.meter
            .charge(count.saturating_add(count.saturating_mul(log2)))
            .map_err(|e| self.fail(&e, Some(&chunk)))?;
        tests.sort_by(|a, b| a.0.cmp(&b.0));
        if tests.is_empty() {
            return Err(OpError::schema(
                &chunk.name,
                "test module must return at least one `test_*` function",
            ));
        }
        for (name, test) in &tests {
            self.begin(self.policy_wall())?;
            test.call::<()>(()).map_err(|e| {
                self.fail(&e, Some(&chunk))
                    .with_context(format!("test: {name}"))
            })?;
        }
        Ok(Json::from(tests.len() as u64))
    }
}
