//! `run` and `plugin_command`: a runner module or a plugin command called
//! with the execution context, under the runner ABI (legacy and v1), with
//! the absolute deadline of a plugin command (SPEC §7.1, §7.2).

use super::{Vm, normalize_shebang, source_len};
use crate::convert::{RETURN_SHAPE, to_json, to_lua};
use crate::diag::{Chunk, lua_failure};
use crate::error::OpError;
use crate::runner::{self, Captured};
use crate::sandbox::process_view::RequestProcess;
use mlua::{Function, Table, Value};
use quirl_lua_protocol::records::{ExecutionContext, ExecutionInput, OutputTarget};
use serde_json::Value as Json;
use std::time::{Duration, Instant};

/// The capture bound the context asks for (`capture` output, which the
/// capability `lua.io` allows), if any.
fn capture_bound(context: &ExecutionContext) -> Option<u64> {
    match context.output {
        OutputTarget::Capture {
            max_bytes_per_stream,
        } => Some(max_bytes_per_stream),
        OutputTarget::Value | OutputTarget::Inherit => None,
    }
}

/// What the guest's process sees of the context (capabilities `lua.io`
/// and `lua.os`): the input bytes as stdin (a structured value or no input
/// is an empty stdin), the declared environment, the capture bound.
fn request_process(context: &ExecutionContext) -> RequestProcess {
    RequestProcess {
        stdin: match &context.input {
            ExecutionInput::Bytes(bytes) => bytes.clone(),
            ExecutionInput::None | ExecutionInput::Value(_) => Vec::new(),
        },
        environment: context.environment.clone(),
        capture: capture_bound(context),
    }
}

impl Vm {
    /// What the script wrote, when the context asks for captured output;
    /// the request's output is taken, so call it once the script is done.
    fn captured(&self, capture: Option<u64>) -> Option<Captured> {
        let bound = capture?;
        let finished = self.process.finish();
        Some(Captured::new(
            finished.stdout,
            finished.stderr,
            finished.cut,
            bound,
        ))
    }

    /// The runner's answer once the script is done: its outcome, or, when
    /// it called `os.exit` (capability `lua.os`), that status with what it
    /// wrote.
    fn runner_ending(
        &self,
        result: Result<Json, OpError>,
        capture: Option<u64>,
    ) -> Result<Json, OpError> {
        if !self.meter.exited() {
            return result;
        }
        let finished = self.process.finish();
        match finished.exit {
            Some(status) => runner::exit_outcome(
                status,
                capture.map(|bound| {
                    Captured::new(finished.stdout, finished.stderr, finished.cut, bound)
                }),
            ),
            None => result,
        }
    }

    fn context_table(&self, context: &ExecutionContext) -> Result<Table, OpError> {
        self.context_lua_table(
            context,
            &runner::wire_json(&context.input)?,
            &runner::wire_json(&context.output)?,
        )
        .map_err(|e| lua_failure(&e, &[]))
    }

    fn context_lua_table(
        &self,
        context: &ExecutionContext,
        input: &Json,
        output: &Json,
    ) -> mlua::Result<Table> {
        let lua = &self.lua;
        let table = lua.create_table()?;
        table.raw_set("abi_version", runner::ABI_VERSION)?;
        table.raw_set(
            "args",
            lua.create_sequence_from(context.arguments.iter().map(String::as_str))?,
        )?;
        let env = lua.create_table_with_capacity(0, context.environment.len())?;
        for (key, value) in &context.environment {
            env.raw_set(key.as_str(), value.as_str())?;
        }
        table.raw_set("env", env)?;
        table.raw_set("cwd", context.working_directory.as_str())?;
        table.raw_set("input", to_lua(lua, input)?)?;
        table.raw_set("output", to_lua(lua, output)?)?;
        table.raw_set(
            "effects",
            lua.create_sequence_from(runner::effect_names(context.declared_effects))?,
        )?;
        let cancellation = lua.create_table()?;
        cancellation.raw_set("is_cancelled", self.is_cancelled.clone())?;
        table.raw_set("cancellation", cancellation)?;
        Ok(table)
    }

    pub(super) fn run(
        &mut self,
        source: &str,
        source_name: String,
        context: &ExecutionContext,
    ) -> Result<Json, OpError> {
        runner::check_context(context, self.options.lua_io)?;
        source_len(source, &source_name)?;
        let chunk = Chunk {
            name: source_name,
            text: normalize_shebang(source),
        };
        let capture = capture_bound(context);
        self.process.begin(request_process(context));
        self.begin(self.policy_wall())?;
        let result = self.run_chunk(&chunk, context, capture);
        self.runner_ending(result, capture)
    }

    fn run_chunk(
        &mut self,
        chunk: &Chunk,
        context: &ExecutionContext,
        capture: Option<u64>,
    ) -> Result<Json, OpError> {
        self.meter.check_clock().map_err(|e| lua_failure(&e, &[]))?;
        let module = self.evaluate(chunk)?;
        self.meter.check_clock().map_err(|e| lua_failure(&e, &[]))?;
        let Value::Table(module) = module else {
            let value = to_json(&module, &RETURN_SHAPE, "runner result")?;
            return runner::legacy_outcome(&value, self.captured(capture));
        };
        let version = self.module_abi_version(&module, chunk)?;
        let main = module
            .raw_get::<Value>("main")
            .map_err(|e| self.fail(&e, Some(chunk)))?;
        match version {
            0 => self.run_legacy_module(module, main, context, chunk, capture),
            runner::ABI_VERSION => self.run_v1_module(&module, main, context, chunk, capture),
            other => Err(runner::unsupported_abi(other)),
        }
    }

    /// The module's `abi_version`: absent is 0 (legacy), else a
    /// non-negative integer.
    fn module_abi_version(&self, module: &Table, chunk: &Chunk) -> Result<u64, OpError> {
        match module
            .raw_get::<Value>("abi_version")
            .map_err(|e| self.fail(&e, Some(chunk)))?
        {
            Value::Nil => Ok(0),
            Value::Integer(v) if v >= 0 => Ok(v as u64),
            Value::Number(v) if v >= 0.0 && v.fract() == 0.0 && v <= u32::MAX as f64 => {
                Ok(v as u64)
            }
            other => Err(runner::boundary_error(
                &chunk.name,
                format!(
                    "invalid module ABI version: expected an integer, found Lua {}",
                    other.type_name()
                ),
            )),
        }
    }

    /// A legacy (ABI 0) module: its `main` called if it has one, else the
    /// module itself is the result.
    fn run_legacy_module(
        &self,
        module: Table,
        main: Value,
        context: &ExecutionContext,
        chunk: &Chunk,
        capture: Option<u64>,
    ) -> Result<Json, OpError> {
        let value = match main {
            Value::Function(main) => self.call_main(&main, context, chunk)?,
            Value::Nil => Value::Table(module),
            _ => {
                return Err(runner::boundary_error(
                    &chunk.name,
                    "module field `main` must be a function",
                ));
            }
        };
        let value = to_json(&value, &RETURN_SHAPE, "runner result")?;
        runner::legacy_outcome(&value, self.captured(capture))
    }

    /// An ABI v1 module: only the known keys, and a `main` function whose
    /// result is the runner result record.
    fn run_v1_module(
        &self,
        module: &Table,
        main: Value,
        context: &ExecutionContext,
        chunk: &Chunk,
        capture: Option<u64>,
    ) -> Result<Json, OpError> {
        let mut keys = Vec::new();
        for pair in module.pairs::<Value, Value>() {
            let (key, _) = pair.map_err(|e| self.fail(&e, Some(chunk)))?;
            keys.push(match key {
                Value::String(s) => s.to_str().ok().map(|s| s.to_owned()),
                _ => None,
            });
        }
        runner::check_module_keys(keys.iter().map(Option::as_deref), &chunk.name)?;
        let Value::Function(main) = main else {
            return Err(runner::boundary_error(
                &chunk.name,
                "Lua runner ABI v1 module must contain a `main` function",
            ));
        };
        let value = self.call_main(&main, context, chunk)?;
        let value = to_json(&value, &RETURN_SHAPE, "runner result")?;
        runner::decode_result(&value, &chunk.name, self.captured(capture))
    }

    fn call_main(
        &self,
        main: &Function,
        context: &ExecutionContext,
        chunk: &Chunk,
    ) -> Result<Value, OpError> {
        let table = self.context_table(context)?;
        let value = main
            .call::<Value>(table)
            .map_err(|e| self.fail(&e, Some(chunk)))?;
        self.meter.check_clock().map_err(|e| lua_failure(&e, &[]))?;
        Ok(value)
    }

    pub(super) fn plugin_command(
        &mut self,
        name: &str,
        context: &ExecutionContext,
        deadline_ms: u64,
    ) -> Result<Json, OpError> {
        let received = Instant::now();
        runner::check_context(context, self.options.lua_io)?;
        let function = {
            let registry = self.state.registry().map_err(|e| lua_failure(&e, &[]))?;
            let key = registry
                .commands
                .get(name)
                .ok_or_else(|| OpError::schema(name, format!("unknown plugin command `{name}`")))?;
            self.callback(key)?
        };
        let table = self.context_table(context)?;
        let remaining = Duration::from_millis(deadline_ms).saturating_sub(received.elapsed());
        if remaining.is_zero() {
            return Err(OpError::resource_limit(
                "plugin command input conversion exceeded its absolute deadline",
            )
            .with_help("Reduce typed input size or callback work before retrying"));
        }
        let capture = capture_bound(context);
        self.process.begin(request_process(context));
        self.begin(remaining)?;
        let result = self.run_command(name, &function, table, capture);
        self.runner_ending(result, capture)
    }

    fn run_command(
        &self,
        name: &str,
        function: &Function,
        table: Table,
        capture: Option<u64>,
    ) -> Result<Json, OpError> {
        self.meter.check_clock().map_err(|e| lua_failure(&e, &[]))?;
        let value = self.call(function, Value::Table(table))?;
        self.meter.check_clock().map_err(|e| lua_failure(&e, &[]))?;
        let value = to_json(&value, &RETURN_SHAPE, "plugin command result")?;
        runner::decode_result(&value, name, self.captured(capture))
    }
}
