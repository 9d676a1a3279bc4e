//! The worker's VM: one sandboxed Lua state, its budgets and its plugin
//! state, and the semantics of every v1 operation after `initialize`.
//!
//! [`Vm::handle`] runs one request and returns a [`Verdict`]. The verdict is
//! taken from the [`Meter`] first: if a budget tripped at any point of the
//! request (even if the guest caught the error and returned normally) the
//! verdict is [`Verdict::Retired`] with the `resource_limit` error, and the
//! VM must not be used again; if the parent broke the protocol during a host
//! call it is [`Verdict::Violation`]. Only a request that never stopped can
//! succeed.
//!
//! Globals, registrations and callbacks persist across requests (SPEC §15);
//! budgets are reset for every request, every test function and every
//! callback (with the callback's own deadline, capped by the policy).

use crate::config;
use crate::convert::{RETURN_SHAPE, Shape, to_json, to_lua};
use crate::diag::{Chunk, lua_failure};
use crate::error::{ErrorCode, OpError, has_terminal_controls};
use crate::events::{self, Event};
use crate::meter::{Meter, Stop};
use crate::registry::{Registry, contribution_title};
use crate::runner;
use crate::sandbox;
use crate::sdk::{self, Capabilities, HostPort, SdkState};
use mlua::chunk::ChunkMode;
use mlua::{Function, Lua, Table, Value};
use quirl_lua_protocol::limits::{
    COMPLETION_ITEM_BYTES_MAX, COMPLETION_ITEMS_MAX, COMPLETION_RESULT_BYTES_MAX,
    PROMPT_RETURN_BYTES_MAX, SOURCE_BYTES_MAX,
};
use quirl_lua_protocol::{
    ContributionKind, ExecutionContext, ExtensionEvent, Operation, OperationResult,
    PluginRegistrations, Policy,
};
use serde_json::Value as Json;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Worker-only (SPEC §15.10; no protocol counterpart): deadline of
/// completion callbacks.
pub const COMPLETION_DEADLINE: Duration = Duration::from_millis(50);

/// Worker-only (Quirl's SDK conversion; SPEC §15.10): shape bounds for
/// configuration tables (larger than return values: a configuration may
/// carry 32 palettes).
const CONFIG_SHAPE: Shape = Shape {
    nodes: 16_384,
    depth: 16,
    bytes: 1024 * 1024,
    index_max: 4_096,
};

/// Everything `initialize` decides.
#[derive(Debug, Clone)]
pub struct VmConfig {
    /// Budgets and the process switch (the protocol's policy record).
    pub policy: Policy,
    /// Explicit grants; `None` means Quirl's defaults for the policy.
    pub grants: Option<Vec<String>>,
    /// Whether the parent offers a process host.
    pub process_enabled: bool,
}

/// How a request ended.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// `ok: true` with this result.
    Success(Json),
    /// `ok: false` with this error; the VM stays usable.
    Failure(OpError),
    /// A budget tripped: answer `ok: false` with this `resource_limit`
    /// error, then discard the VM without closing it (exit the process).
    Retired(OpError),
    /// The parent broke the protocol during a host call: do not answer;
    /// exit nonzero.
    Violation(String),
}

/// A sandboxed VM and its state.
pub struct Vm {
    lua: Lua,
    meter: Arc<Meter>,
    state: Arc<SdkState>,
    next_generation: Function,
    is_cancelled: Function,
    policy: Policy,
    plugin: Option<Chunk>,
    /// The last compiled `eval` chunk, by exact source text (see
    /// [`Vm::eval_function`]).
    eval_cache: Option<(String, Function)>,
}

/// Longest `eval` source whose compiled chunk is kept for reuse. Keeps the
/// memory the cache retains inside the VM (and so inside the guest's
/// memory budget, which it is charged to) to a few KiB.
const EVAL_CACHE_SOURCE_BYTES_MAX: usize = 1024;

fn build_error(error: &mlua::Error) -> OpError {
    OpError::lua("could not build the Lua sandbox").with_context(error.to_string())
}

fn source_len(source: &str, name: &str) -> Result<(), OpError> {
    if source.len() > SOURCE_BYTES_MAX {
        return Err(
            OpError::resource_limit(format!("Lua source {name} exceeds its read limit"))
                .with_context(format!(
                    "limit: {SOURCE_BYTES_MAX}; observed: {}",
                    source.len()
                ))
                .with_help(
                    "Keep executable Lua source below 4 MiB and load data through bounded host APIs",
                ),
        );
    }
    Ok(())
}

fn normalize_shebang(source: &str) -> String {
    match source.strip_prefix("#!") {
        Some(rest) => format!("--{rest}"),
        None => source.to_owned(),
    }
}

impl Vm {
    /// Build the VM for `config`. `cancel` is observed by the hook; `host`
    /// carries host calls to the parent (needed only when
    /// `process_enabled`).
    pub fn new(
        config: &VmConfig,
        cancel: Arc<AtomicBool>,
        host: Option<Box<dyn HostPort>>,
    ) -> Result<Self, OpError> {
        let policy = config.policy;
        let meter = Arc::new(Meter::new(
            policy.memory_limit_bytes(),
            policy.instruction_limit(),
            Arc::clone(&cancel),
        ));
        let sandbox::Sandbox {
            lua,
            next_generation,
        } = sandbox::build(&meter).map_err(|e| build_error(&e))?;
        let grants = match &config.grants {
            Some(grants) => grants.iter().cloned().collect(),
            None => sdk::default_grants(policy.allow_process()),
        };
        let state = Arc::new(SdkState {
            meter: Arc::clone(&meter),
            registry: Mutex::new(Registry::default()),
            capabilities: Capabilities {
                allow_process: policy.allow_process(),
                process_enabled: config.process_enabled,
                grants,
            },
            host: Mutex::new(host),
            host_calls: AtomicU32::new(0),
            cwd: std::env::current_dir()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            last_config: Mutex::new(None),
        });
        sdk::install(&lua, &state).map_err(|e| build_error(&e))?;
        let is_cancelled = lua
            .create_function(move |_, ()| Ok(cancel.load(Ordering::Relaxed)))
            .map_err(|e| build_error(&e))?;
        lua.gc_collect().map_err(|e| build_error(&e))?;
        let baseline = lua.used_memory() as u64;
        if baseline >= policy.memory_limit_bytes() {
            return Err(OpError::resource_limit(
                "memory_limit_bytes is smaller than the sandbox itself",
            )
            .with_context("limit: memory")
            .with_context(format!(
                "observed: {baseline} bytes before any guest code; limit: {} bytes",
                policy.memory_limit_bytes()
            ))
            .with_help("Raise memory_limit_bytes"));
        }
        lua.set_memory_limit(usize::try_from(policy.memory_limit_bytes()).unwrap_or(usize::MAX))
            .map_err(|e| build_error(&e))?;
        crate::alloc_gate::install(&lua, Arc::clone(&meter));
        sandbox::install_hook(&lua, &meter).map_err(|e| build_error(&e))?;
        Ok(Self {
            lua,
            meter,
            state,
            next_generation,
            is_cancelled,
            policy,
            plugin: None,
            eval_cache: None,
        })
    }

    /// The VM's meter (budgets and stop record).
    pub fn meter(&self) -> &Arc<Meter> {
        &self.meter
    }

    /// Bytes the VM holds.
    pub fn used_memory(&self) -> u64 {
        self.meter.used_memory()
    }

    /// Run one operation (any but `initialize`, which builds the VM: see
    /// [`Vm::new`]).
    pub fn handle(&mut self, operation: Operation) -> Verdict {
        if let Some(verdict) = self.stopped_verdict() {
            return verdict;
        }
        self.state.host_calls.store(0, Ordering::Relaxed);
        let active = crate::vm_costs::ActiveMeter::enter(&self.meter);
        let result = self.dispatch(operation);
        drop(active);
        self.meter.end();
        match self.stopped_verdict() {
            Some(verdict) => verdict,
            None => match result {
                Ok(value) => Verdict::Success(value),
                Err(error) => Verdict::Failure(error.bounded()),
            },
        }
    }

    fn stopped_verdict(&self) -> Option<Verdict> {
        match self.meter.settle()? {
            Stop::Limit(trip) => Some(Verdict::Retired(trip.to_error().bounded())),
            Stop::Violation(reason) => Some(Verdict::Violation(reason.clone())),
        }
    }

    fn dispatch(&mut self, operation: Operation) -> Result<Json, OpError> {
        match operation {
            Operation::Initialize { .. } => Err(OpError::validation(
                "initialize builds the VM; a built VM does not handle it",
            )),
            Operation::Eval { source } => self.eval(source),
            Operation::Check {
                source,
                source_name,
            } => self.check(&source, source_name),
            Operation::LoadConfig {
                source,
                source_name,
            } => self.load_config(source, source_name),
            Operation::LoadPlugin {
                source,
                source_name,
            } => self.load_plugin(source, source_name),
            Operation::RenderPrompt { name, context } => self.render_prompt(&name, &context),
            Operation::Complete { command, context } => self.complete(&command, &context),
            Operation::Contribution {
                kind,
                name,
                context,
            } => self.contribution(kind, &name, &context),
            Operation::Run {
                source,
                source_name,
                context,
            } => self.run(&source, source_name, &context),
            Operation::PluginCommand {
                name,
                context,
                deadline_ms,
            } => self.plugin_command(&name, &context, deadline_ms),
            Operation::Event { event } => self.event(&event),
            Operation::Test {
                source,
                source_name,
            } => self.test(&source, source_name),
        }
    }

    fn policy_wall(&self) -> Duration {
        Duration::from_millis(self.policy.wall_time_ms())
    }

    /// Reset the budgets for a window of at most `wall` (capped by the
    /// policy).
    fn begin(&self, wall: Duration) -> Result<(), OpError> {
        self.meter.begin(
            self.policy.instruction_limit(),
            wall.min(self.policy_wall()),
        );
        self.next_generation
            .call::<()>(())
            .map_err(|e| lua_failure(&e, &[]))?;
        sandbox::install_hook(&self.lua, &self.meter).map_err(|e| lua_failure(&e, &[]))
    }

    fn chunks<'a>(&'a self, extra: Option<&'a Chunk>) -> Vec<&'a Chunk> {
        extra.into_iter().chain(self.plugin.as_ref()).collect()
    }

    fn fail(&self, error: &mlua::Error, chunk: Option<&Chunk>) -> OpError {
        lua_failure(error, &self.chunks(chunk))
    }

    fn compile_block(&self, chunk: &Chunk) -> mlua::Result<Function> {
        self.lua
            .load(chunk.text.as_str())
            .set_name(chunk.lua_name())
            .set_mode(ChunkMode::Text)
            .into_function()
    }

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

    fn evaluate(&self, chunk: &Chunk) -> Result<Value, OpError> {
        self.compile_eval(chunk)
            .and_then(|f| f.call::<Value>(()))
            .map_err(|e| self.fail(&e, Some(chunk)))
    }

    fn eval(&mut self, source: String) -> Result<Json, OpError> {
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

    fn check(&mut self, source: &str, source_name: String) -> Result<Json, OpError> {
        source_len(source, &source_name)?;
        let chunk = Chunk {
            name: source_name,
            text: normalize_shebang(source),
        };
        self.begin(self.policy_wall())?;
        self.compile_block(&chunk)
            .map_err(|e| self.fail(&e, Some(&chunk)))?;
        Ok(Json::Null)
    }

    fn load_config(&mut self, source: String, source_name: String) -> Result<Json, OpError> {
        source_len(&source, &source_name)?;
        let chunk = Chunk {
            name: source_name,
            text: source,
        };
        self.take_last_config();
        self.begin(self.policy_wall())?;
        let mut value = self.evaluate(&chunk)?;
        if value.is_nil()
            && let Some(key) = self.take_last_config()
        {
            // `quirl.config{…}` called without `return`.
            value = self
                .lua
                .registry_value::<Value>(&key)
                .map_err(|e| lua_failure(&e, &[]))?;
        }
        let json = to_json(&value, &CONFIG_SHAPE, "configuration")?;
        config::to_json(&config::from_lua_json(&json, &chunk.name)?)
    }

    fn take_last_config(&self) -> Option<mlua::RegistryKey> {
        self.state.last_config.lock().ok()?.take()
    }

    fn clear_plugin(&mut self) -> Result<(), OpError> {
        self.state
            .registry()
            .map_err(|e| lua_failure(&e, &[]))?
            .clear();
        Ok(())
    }

    fn load_plugin(&mut self, source: String, source_name: String) -> Result<Json, OpError> {
        source_len(&source, &source_name)?;
        let chunk = Chunk {
            name: source_name,
            text: source,
        };
        self.clear_plugin()?;
        self.plugin = None;
        self.begin(self.policy_wall())?;
        let loaded = self
            .compile_block(&chunk)
            .and_then(|f| f.call::<()>(()))
            .map_err(|e| self.fail(&e, Some(&chunk)));
        if let Err(error) = loaded {
            self.clear_plugin()?;
            return Err(error);
        }
        let registrations = self
            .state
            .registry()
            .map_err(|e| lua_failure(&e, &[]))?
            .registrations
            .clone();
        if registrations == PluginRegistrations::default() {
            return Err(OpError::schema(
                &chunk.name,
                "plugin did not register a command, prompt segment, completion provider, event handler, or contribution",
            ));
        }
        self.plugin = Some(chunk);
        OperationResult::Plugin(registrations)
            .to_value()
            .map_err(|e| OpError::validation(format!("could not encode registrations: {e}")))
    }

    fn callback(&self, key: &mlua::RegistryKey) -> Result<Function, OpError> {
        self.lua
            .registry_value::<Function>(key)
            .map_err(|e| lua_failure(&e, &[]))
    }

    fn context(&self, context: &Json) -> Result<Value, OpError> {
        to_lua(&self.lua, context).map_err(|e| lua_failure(&e, &[]))
    }

    fn call(&self, function: &Function, argument: Value) -> Result<Value, OpError> {
        function
            .call::<Value>(argument)
            .map_err(|e| self.fail(&e, None))
    }

    fn render_prompt(&mut self, name: &str, context: &Json) -> Result<Json, OpError> {
        let (function, deadline) = {
            let registry = self.state.registry().map_err(|e| lua_failure(&e, &[]))?;
            let callback = registry
                .prompts
                .get(name)
                .ok_or_else(|| OpError::schema(name, format!("unknown prompt segment `{name}`")))?;
            (self.callback(&callback.function)?, callback.deadline)
        };
        let context = self.context(context)?;
        self.begin(deadline)?;
        match self.call(&function, context)? {
            Value::Nil => Ok(Json::Null),
            Value::String(text) => {
                let bytes = text.as_bytes();
                if bytes.len() > PROMPT_RETURN_BYTES_MAX {
                    return Err(crate::convert::shape_limit(
                        "Lua callback return",
                        "prompt bytes",
                        bytes.len(),
                        PROMPT_RETURN_BYTES_MAX,
                    ));
                }
                let text = std::str::from_utf8(&bytes).map_err(|e| {
                    OpError::schema(
                        name,
                        format!("prompt segment must return valid UTF-8 text: {e}"),
                    )
                })?;
                if has_terminal_controls(text) {
                    return Err(OpError::validation(
                        "prompt segment contains forbidden terminal control bytes",
                    )
                    .with_help(
                        "Return plain text or typed styled values; Quirl owns terminal control",
                    ));
                }
                Ok(Json::String(text.to_owned()))
            }
            other => Err(OpError::schema(
                name,
                format!(
                    "prompt segment must return text or nil, not Lua {}",
                    other.type_name()
                ),
            )),
        }
    }

    fn complete(&mut self, command: &str, context: &Json) -> Result<Json, OpError> {
        let function = {
            let registry = self.state.registry().map_err(|e| lua_failure(&e, &[]))?;
            let key = registry.completions.get(command).ok_or_else(|| {
                OpError::schema(command, format!("unknown completion provider `{command}`"))
            })?;
            self.callback(key)?
        };
        let context = self.context(context)?;
        self.begin(COMPLETION_DEADLINE)?;
        let value = self.call(&function, context)?;
        let value = to_json(&value, &RETURN_SHAPE, "completion result")?;
        check_completion(&value, command)?;
        Ok(value)
    }

    fn contribution(
        &mut self,
        kind: ContributionKind,
        name: &str,
        context: &Json,
    ) -> Result<Json, OpError> {
        let (function, deadline) = {
            let registry = self.state.registry().map_err(|e| lua_failure(&e, &[]))?;
            let callback = registry
                .contributions
                .get(&(kind, name.to_owned()))
                .ok_or_else(|| {
                    OpError::schema(
                        name,
                        format!("unknown {} contribution `{name}`", contribution_title(kind)),
                    )
                })?;
            (self.callback(&callback.function)?, callback.deadline)
        };
        let context = self.context(context)?;
        self.begin(deadline)?;
        let value = self.call(&function, context)?;
        let value = to_json(&value, &RETURN_SHAPE, "contribution result")?;
        events::check_terminal_safe("extension contribution output", &value)?;
        Ok(value)
    }

    fn event(&mut self, record: &ExtensionEvent) -> Result<Json, OpError> {
        let (event, mut handlers) = {
            let mut registry = self.state.registry().map_err(|e| lua_failure(&e, &[]))?;
            let event = Event::new(record, registry.last_event_sequence)?;
            registry.last_event_sequence = Some(event.sequence);
            let handlers = registry
                .events
                .iter()
                .filter(|(_, handler)| handler.events.contains(&event.kind))
                .map(|(name, handler)| {
                    Ok((
                        name.clone(),
                        self.callback(&handler.callback.function)?,
                        handler.capabilities.clone(),
                        handler.callback.deadline,
                    ))
                })
                .collect::<Result<Vec<_>, OpError>>()?;
            (event, handlers)
        };
        handlers.sort_by(|a, b| a.0.cmp(&b.0));
        let mut reports = Vec::with_capacity(handlers.len());
        for (name, function, capabilities, deadline) in handlers {
            let outcome = self
                .context(&event.view(&capabilities))
                .and_then(|view| {
                    self.begin(deadline)?;
                    self.call(&function, view)
                })
                .and_then(|value| to_json(&value, &RETURN_SHAPE, "event handler result"))
                .and_then(|value| events::actions(&value, &name, &capabilities));
            if self.meter.settle().is_some() {
                break;
            }
            reports.push(events::report(&name, outcome));
        }
        Ok(Json::Array(reports))
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

    fn run(
        &mut self,
        source: &str,
        source_name: String,
        context: &ExecutionContext,
    ) -> Result<Json, OpError> {
        runner::check_context(context)?;
        source_len(source, &source_name)?;
        let chunk = Chunk {
            name: source_name,
            text: normalize_shebang(source),
        };
        self.begin(self.policy_wall())?;
        self.meter.check_clock().map_err(|e| lua_failure(&e, &[]))?;
        let module = self.evaluate(&chunk)?;
        self.meter.check_clock().map_err(|e| lua_failure(&e, &[]))?;
        let Value::Table(module) = module else {
            let value = to_json(&module, &RETURN_SHAPE, "runner result")?;
            return runner::legacy_outcome(&value);
        };
        let version = match module
            .raw_get::<Value>("abi_version")
            .map_err(|e| self.fail(&e, Some(&chunk)))?
        {
            Value::Nil => 0,
            Value::Integer(v) if v >= 0 => v as u64,
            Value::Number(v) if v >= 0.0 && v.fract() == 0.0 && v <= u32::MAX as f64 => v as u64,
            other => {
                return Err(runner::boundary_error(
                    &chunk.name,
                    format!(
                        "invalid module ABI version: expected an integer, found Lua {}",
                        other.type_name()
                    ),
                ));
            }
        };
        let main = module
            .raw_get::<Value>("main")
            .map_err(|e| self.fail(&e, Some(&chunk)))?;
        match version {
            0 => {
                let value = match main {
                    Value::Function(main) => self.call_main(&main, context, &chunk)?,
                    Value::Nil => Value::Table(module),
                    _ => {
                        return Err(runner::boundary_error(
                            &chunk.name,
                            "module field `main` must be a function",
                        ));
                    }
                };
                let value = to_json(&value, &RETURN_SHAPE, "runner result")?;
                runner::legacy_outcome(&value)
            }
            runner::ABI_VERSION => {
                let mut keys = Vec::new();
                for pair in module.pairs::<Value, Value>() {
                    let (key, _) = pair.map_err(|e| self.fail(&e, Some(&chunk)))?;
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
                let value = self.call_main(&main, context, &chunk)?;
                let value = to_json(&value, &RETURN_SHAPE, "runner result")?;
                runner::decode_result(&value, &chunk.name)
            }
            other => Err(runner::unsupported_abi(other)),
        }
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

    fn plugin_command(
        &mut self,
        name: &str,
        context: &ExecutionContext,
        deadline_ms: u64,
    ) -> Result<Json, OpError> {
        let received = Instant::now();
        runner::check_context(context)?;
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
        self.begin(remaining)?;
        self.meter.check_clock().map_err(|e| lua_failure(&e, &[]))?;
        let value = self.call(&function, Value::Table(table))?;
        self.meter.check_clock().map_err(|e| lua_failure(&e, &[]))?;
        let value = to_json(&value, &RETURN_SHAPE, "plugin command result")?;
        runner::decode_result(&value, name)
    }

    fn test(&mut self, source: &str, source_name: String) -> Result<Json, OpError> {
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

fn check_completion(value: &Json, command: &str) -> Result<(), OpError> {
    let Json::Array(items) = value else {
        return Err(OpError::schema(
            command,
            "completion provider must return an array",
        ));
    };
    if items.len() > COMPLETION_ITEMS_MAX {
        return Err(OpError::resource_limit(format!(
            "completion provider `{command}` returned too many items"
        ))
        .with_context(format!(
            "items: {}; limit: {COMPLETION_ITEMS_MAX}",
            items.len()
        ))
        .with_help("Return the most relevant completion items and keep the result bounded"));
    }
    let mut total = 0_usize;
    for (index, item) in items.iter().enumerate() {
        let bytes = match item {
            Json::String(value) => value.len(),
            Json::Object(object)
                if object.get("value").is_some_and(Json::is_string)
                    && object.iter().all(|(key, value)| {
                        matches!(key.as_str(), "value" | "display" | "summary" | "detail")
                            && value.is_string()
                    }) =>
            {
                object.values().filter_map(Json::as_str).map(str::len).sum()
            }
            _ => {
                return Err(OpError::schema(
                    command,
                    format!(
                        "completion item {index} must be a string or an object with a string `value` and optional string display fields"
                    ),
                ));
            }
        };
        if bytes > COMPLETION_ITEM_BYTES_MAX {
            return Err(OpError::new(
                ErrorCode::ResourceLimit,
                format!("completion item {index} from `{command}` is too large"),
            )
            .with_context(format!(
                "bytes: {bytes}; limit: {COMPLETION_ITEM_BYTES_MAX}"
            ))
            .with_help("Shorten completion display, summary, and detail text"));
        }
        total += bytes;
        if total > COMPLETION_RESULT_BYTES_MAX {
            return Err(crate::convert::shape_limit(
                "Lua callback return",
                "completion retained bytes",
                total,
                COMPLETION_RESULT_BYTES_MAX,
            ));
        }
    }
    Ok(())
}
