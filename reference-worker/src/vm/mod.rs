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
//! Globals, registrations and callbacks persist across requests (DESIGN §15);
//! budgets are reset for every request, every test function and every
//! callback (with the callback's own deadline, capped by the policy).
//!
//! This module holds the VM itself — its construction, the dispatch of an
//! operation and the per-request verdict — and what every operation shares
//! (budget windows, compiling a block, calling a registered callback). The
//! operations live in the submodules, one family each:
//!
//! - `eval`: `eval` and `test` (SPEC §7.1, DESIGN §15.10);
//! - `check`: `check`, compiled and linted without running (§7.1, §7.2);
//! - `load_config`: `load_config` (§7.1, §7.2 QuirlConfig);
//! - `plugin`: `load_plugin` and its registrations (§7.2, §15.9);
//! - `callbacks`: `render_prompt`, `complete` and `contribution`;
//! - `event`: `event`, dispatched to the subscribed handlers (§6.16, §7.2);
//! - `run`: `run` and `plugin_command`, the runner ABI (§7.1, §7.2).

mod callbacks;
mod check;
mod eval;
mod event;
mod load_config;
mod plugin;
mod run;

pub use callbacks::COMPLETION_DEADLINE;

use crate::budget::{Limits, Meter, Stop};
use crate::convert::to_lua;
use crate::diag::{Chunk, lua_failure};
use crate::error::OpError;
use crate::registry::Registry;
use crate::sandbox;
use crate::sandbox::grants::{Capabilities, default_grants};
use crate::sandbox::process_view::{ProcessView, RequestProcess};
use crate::sandbox::sdk::{self, HostPort, SdkState};
use mlua::chunk::ChunkMode;
use mlua::{Function, Lua, Value};
use quirl_lua_protocol::limits::SOURCE_BYTES_MAX;
use quirl_lua_protocol::records::{Operation, Policy};
use serde_json::Value as Json;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// The process the guest sees (`lua.io`, `lua.os`): set per request.
    process: Arc<ProcessView>,
    /// The sandbox capabilities the VM was built with.
    options: sandbox::SandboxOptions,
    state: Arc<SdkState>,
    is_cancelled: Function,
    limits: Limits,
    plugin: Option<Chunk>,
    /// The last compiled `eval` chunk, by exact source text (see
    /// [`Vm::eval_function`]).
    eval_cache: Option<(String, Function)>,
    /// What the last `check` left to free (its parse tree), freed by
    /// [`Vm::release_deferred`] once the answer is out, or by the next request.
    deferred: Option<crate::lint::Deferred>,
}

fn build_error(error: &mlua::Error) -> OpError {
    OpError::lua("could not build the Lua sandbox").with_context(error.to_string())
}

/// The error a request other than `run` and `plugin_command` ends with
/// when its guest called `os.exit(status)` (capability `lua.os`).
fn exit_error(status: i32) -> OpError {
    OpError::lua(format!(
        "Lua runtime error: the script called os.exit({status})"
    ))
    .with_context("lua failure: exit")
    .with_exit_status(status)
    .with_help("os.exit ends the request; only run and plugin_command (the runner ABI) answer its status as an outcome")
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

/// A fresh sandbox for `grants`, built as [`Vm::new`] builds one (the
/// libraries, the pruned globals, the `quirl` table), in a Lua state of its
/// own that never runs anything: no meter is attached, no host is
/// reachable, no code is loaded. The lint reads its globals as the standard
/// library of those grants (`crate::lint::environment`), so the lint's list
/// is the worker's own, not a copy of it.
pub(crate) fn fresh_sandbox(grants: &HashSet<String>) -> mlua::Result<Lua> {
    let meter = Arc::new(Meter::new(0, 1, Arc::new(AtomicBool::new(false))));
    let options = sandbox::SandboxOptions::from_grants(grants.iter().map(String::as_str));
    let sandbox::Sandbox { lua, .. } = sandbox::build_with(&meter, options)?;
    let state = Arc::new(SdkState {
        meter,
        registry: Mutex::new(Registry::default()),
        capabilities: Capabilities {
            allow_process: false,
            process_enabled: false,
            grants: grants.clone(),
        },
        host: Mutex::new(None),
        host_calls: AtomicU32::new(0),
        cwd: String::new(),
        last_config: Mutex::new(None),
    });
    sdk::install(&lua, &state)?;
    Ok(lua)
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
        let limits = Limits::from_policy(&policy);
        let meter = Arc::new(Meter::new(
            limits.memory_limit_bytes(),
            limits.instruction_limit(),
            Arc::clone(&cancel),
        ));
        let grants: HashSet<String> = match &config.grants {
            Some(grants) => grants.iter().cloned().collect(),
            None => default_grants(policy.allow_process()),
        };
        // SPEC §7.1, DESIGN §15.3: the sandbox's capabilities (`lua.load`,
        // `lua.os`, `lua.io`) are never default grants.
        let options = sandbox::SandboxOptions::from_grants(grants.iter().map(String::as_str));
        let sandbox::Sandbox { lua, process } =
            sandbox::build_with(&meter, options).map_err(|e| build_error(&e))?;
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
        limits.check_baseline(lua.used_memory() as u64)?;
        meter.attach(&lua);
        meter.count_host_errors(&lua).map_err(|e| build_error(&e))?;
        Ok(Self {
            lua,
            meter,
            process,
            options,
            state,
            is_cancelled,
            limits,
            plugin: None,
            eval_cache: None,
            deferred: None,
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

    /// Free what the last request left to free after its answer (the
    /// parse tree of `check`'s lint). The serve loop calls it once the
    /// answer is written; otherwise the next request frees it first.
    pub fn release_deferred(&mut self) {
        self.deferred = None;
    }

    /// Run one operation (any but `initialize`, which builds the VM: see
    /// [`Vm::new`]).
    pub fn handle(&mut self, operation: Operation) -> Verdict {
        self.release_deferred();
        if let Some(verdict) = self.stopped_verdict() {
            return verdict;
        }
        self.state.host_calls.store(0, Ordering::Relaxed);
        // No stdin, no environment, output dropped: `run` and
        // `plugin_command` set their own from the execution context.
        self.process.begin(RequestProcess::default());
        let mut result = self.dispatch(operation);
        self.meter.end();
        // An `os.exit` the runner ABI did not turn into an outcome (any
        // other operation) ends the request as an error with its status.
        if let Some(status) = self.process.finish().exit {
            result = Err(exit_error(status));
        }
        self.meter.clear_exit();
        match self.stopped_verdict() {
            Some(verdict) => verdict,
            None => match result {
                Ok(value) => Verdict::Success(value),
                Err(error) => Verdict::Failure(error.bounded()),
            },
        }
    }

    fn stopped_verdict(&self) -> Option<Verdict> {
        match self.meter.stopped()? {
            Stop::Limit(trip) => Some(Verdict::Retired(trip.to_error().bounded())),
            Stop::Violation(reason) => Some(Verdict::Violation(reason)),
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
        self.limits.wall_time()
    }

    /// Reset the budgets for a window of at most `wall` (capped by the
    /// policy).
    fn begin(&self, wall: Duration) -> Result<(), OpError> {
        self.limits.begin(&self.meter, wall);
        Ok(())
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
}
