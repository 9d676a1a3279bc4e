//! The Quirl Lua SDK: the global `quirl` table.
//!
//! `quirl.version`, `quirl.cwd()`, `quirl.config(t)`, `quirl.process.run(cmd)`,
//! `quirl.prompt.add_segment{…}`, `quirl.completion.add_provider{…}`,
//! `quirl.plugin.command{…}`, `quirl.events.subscribe{…}` and
//! `quirl.extension.contribute{…}`. Every function first checks that the VM
//! has not stopped. Registrations check their grant, read the metadata
//! through Quirl's registration bounds, validate it, and keep the callback
//! in the VM registry.
//!
//! `quirl.process.run` never starts a process: it checks `allow_process`,
//! the `process.spawn` grant (or a scoped `process.spawn:<program>` grant;
//! both in `super::grants`) and that the parent enabled process access, then asks the parent through
//! a [`HostPort`] and blocks for its answer.

use super::grants::{self, Capabilities, process_granted};
use crate::budget::{LimitTrip, Meter, Stop};
use crate::convert::{REGISTRATION_SHAPE, to_json};
use crate::error::OpError;
use crate::records_from_lua::{self, ReadError};
use crate::registry::{self, Callback, EventCallback, Registry};
use mlua::{Function, Lua, Table, Value};
use quirl_lua_protocol::limits::{
    HOST_CALLS_PER_REQUEST_MAX, HOST_COMMAND_BYTES_MAX, HOST_OUTPUT_BYTES_MAX,
};
use quirl_lua_protocol::records::{ContributionKind, PluginRegistrations, RegistrationError};
use serde_json::Value as Json;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// What the worker asks the parent to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRequest {
    /// Command source.
    pub command: String,
    /// Milliseconds left in the request's budget (at least 1).
    pub deadline_ms: u64,
    /// Per-stream output cap.
    pub max_output_bytes: u64,
}

/// A process result reported by the parent (the protocol's record).
pub use quirl_lua_protocol::records::CommandOutcome;

/// The parent's answer to a host call.
#[derive(Debug, Clone)]
pub enum HostReply {
    /// The command ran.
    Outcome(CommandOutcome),
    /// The parent refused or failed to run it.
    Error(OpError),
    /// The parent broke the protocol (or the stream ended): the VM stops
    /// and the worker exits without answering.
    Violation(String),
}

/// The worker's channel to the parent for host calls. The serve loop
/// implements it over the protocol session; tests use fakes.
pub trait HostPort: Send {
    /// Send one host call and wait for its answer.
    fn call(&mut self, request: HostRequest) -> HostReply;
}

/// State shared by the SDK functions and the VM owner.
pub struct SdkState {
    /// Budgets and the stop record.
    pub meter: Arc<Meter>,
    /// Registrations and callbacks.
    pub registry: Mutex<Registry>,
    /// Fixed capabilities.
    pub capabilities: Capabilities,
    /// Channel to the parent, when process access is enabled.
    pub host: Mutex<Option<Box<dyn HostPort>>>,
    /// Host calls made in the current request.
    pub host_calls: AtomicU32,
    /// The worker's working directory, captured at start.
    pub cwd: String,
    /// The last table passed to `quirl.config` (a `load_config` chunk may
    /// call it without returning its result).
    pub last_config: Mutex<Option<mlua::RegistryKey>>,
}

impl SdkState {
    /// Lock the registry (a poisoned lock is reported, never unwrapped).
    pub fn registry(&self) -> mlua::Result<MutexGuard<'_, Registry>> {
        self.registry
            .lock()
            .map_err(|_| mlua::Error::runtime("plugin state is unavailable"))
    }
}

/// Read a registration table: the callback field must hold a function; the
/// rest is metadata read through Quirl's registration bounds and built into
/// the protocol's record by `build`, which must then pass the record's own
/// `check`.
fn read_spec<T>(
    lua: &Lua,
    spec: &Table,
    callback_field: &str,
    what: &str,
    build: fn(&Json) -> Result<T, ReadError>,
    check: fn(&T) -> Result<(), RegistrationError>,
) -> mlua::Result<(T, Function)> {
    let callback = match spec.raw_get::<Value>(callback_field)? {
        Value::Function(f) => f,
        _ => {
            return Err(mlua::Error::external(registry::registration_error(
                format!("{what} `{callback_field}` must be a function"),
            )));
        }
    };
    let metadata = lua.create_table()?;
    for pair in spec.pairs::<Value, Value>() {
        let (key, value) = pair?;
        let is_callback =
            matches!(&key, Value::String(k) if k.as_bytes() == callback_field.as_bytes());
        if !is_callback {
            metadata.raw_set(key, value)?;
        }
    }
    let json = to_json(
        &Value::Table(metadata),
        &REGISTRATION_SHAPE,
        &format!("{what} registration"),
    )
    .map_err(mlua::Error::external)?;
    let record = build(&json).map_err(|e| {
        mlua::Error::external(registry::registration_error(format!(
            "invalid {what} registration: {e}"
        )))
    })?;
    check(&record).map_err(|e| mlua::Error::external(registry::refused(e)))?;
    Ok((record, callback))
}

fn ext<T>(result: Result<T, OpError>) -> mlua::Result<T> {
    result.map_err(mlua::Error::external)
}

fn admit<T>(
    registry: &mut Registry,
    item: T,
    list: fn(&mut PluginRegistrations) -> &mut Vec<T>,
) -> mlua::Result<()> {
    ext(registry.admit(item, list))
}

/// Install the `quirl` global: the fields of DESIGN §15.9, each built by its
/// own function below (the insertion order is fixed, so `pairs(quirl)`
/// visits the fields in the same order in every VM).
pub fn install(lua: &Lua, state: &Arc<SdkState>) -> mlua::Result<()> {
    let quirl = lua.create_table()?;
    quirl.set("version", env!("CARGO_PKG_VERSION"))?;
    quirl.set("cwd", cwd_function(lua, state)?)?;
    quirl.set("config", config_function(lua, state)?)?;
    quirl.set("process", process_table(lua, state)?)?;
    quirl.set(
        "prompt",
        registration_table(lua, state, "add_segment", add_prompt_segment)?,
    )?;
    quirl.set(
        "completion",
        registration_table(lua, state, "add_provider", add_completion_provider)?,
    )?;
    quirl.set(
        "plugin",
        registration_table(lua, state, "command", add_plugin_command)?,
    )?;
    quirl.set(
        "events",
        registration_table(lua, state, "subscribe", subscribe_to_events)?,
    )?;
    quirl.set(
        "extension",
        registration_table(lua, state, "contribute", add_extension_contribution)?,
    )?;
    lua.globals().set("quirl", quirl)
}

/// `quirl.cwd()`: the working directory captured at start.
fn cwd_function(lua: &Lua, state: &Arc<SdkState>) -> mlua::Result<Function> {
    let state = Arc::clone(state);
    lua.create_function(move |_, ()| {
        state.meter.guard()?;
        Ok(state.cwd.clone())
    })
}

/// `quirl.config(t)`: returns `t` and keeps it as the last configuration.
fn config_function(lua: &Lua, state: &Arc<SdkState>) -> mlua::Result<Function> {
    let state = Arc::clone(state);
    lua.create_function(move |lua, value: Table| {
        state.meter.guard()?;
        let key = lua.create_registry_value(value.clone())?;
        if let Ok(mut last) = state.last_config.lock() {
            *last = Some(key);
        }
        Ok(value)
    })
}

/// `quirl.process`, with `run` (see [`process_run`]).
fn process_table(lua: &Lua, state: &Arc<SdkState>) -> mlua::Result<Table> {
    let process = lua.create_table()?;
    let state = Arc::clone(state);
    process.set(
        "run",
        lua.create_function(move |lua, command: Value| {
            let command = charged_command(lua, &state, command)?;
            process_run(lua, &state, command)
        })?,
    )?;
    Ok(process)
}

/// Bytes of a command converted (UTF-8) and checked (`process_granted`,
/// character by character) per unit charged (`metered-lua/LOOPS.md`).
const COMMAND_BYTES_PER_UNIT: usize = 16;

/// `process.run`'s argument as a `String`, as `mlua` converts a callback's
/// `String` argument (the same errors), with a string charged per
/// [`COMMAND_BYTES_PER_UNIT`] bytes first: the conversion and the grant
/// check read the whole command before its length is checked, a guest's
/// string may be as long as the memory limit allows, and the same string
/// may be passed at every call.
fn charged_command(lua: &Lua, state: &SdkState, command: Value) -> mlua::Result<String> {
    let Value::String(text) = command else {
        return <String as mlua::FromLua>::from_lua_arg(command, 1, None, lua);
    };
    let bytes = text.as_bytes();
    state
        .meter
        .charge(u64::try_from(bytes.len() / COMMAND_BYTES_PER_UNIT).unwrap_or(u64::MAX))?;
    match std::str::from_utf8(&bytes) {
        Ok(text) => Ok(text.to_owned()),
        Err(error) => Err(mlua::Error::BadArgument {
            to: None,
            pos: 1,
            name: None,
            cause: std::sync::Arc::new(mlua::Error::FromLuaConversionError {
                from: "string",
                to: "String".to_owned(),
                message: Some(error.to_string()),
            }),
        }),
    }
}

/// A registration function of the SDK: reads and admits one spec table.
type Register = fn(&Lua, &SdkState, Table) -> mlua::Result<()>;

/// A table with one registration function `field`, which first checks that
/// the VM has not stopped and then calls `register`.
fn registration_table(
    lua: &Lua,
    state: &Arc<SdkState>,
    field: &str,
    register: Register,
) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    let state = Arc::clone(state);
    table.set(
        field,
        lua.create_function(move |lua, spec: Table| {
            state.meter.guard()?;
            register(lua, &state, spec)
        })?,
    )?;
    Ok(table)
}

/// `quirl.prompt.add_segment{…}`.
fn add_prompt_segment(lua: &Lua, state: &SdkState, spec: Table) -> mlua::Result<()> {
    state.capabilities.require("prompt.register")?;
    let (r, render) = read_spec(
        lua,
        &spec,
        "render",
        "prompt segment",
        records_from_lua::prompt_registration,
        quirl_lua_protocol::records::PromptRegistration::check,
    )?;
    let function = lua.create_registry_value(render)?;
    let mut reg = state.registry()?;
    let (name, deadline) = (r.name.clone(), Duration::from_millis(r.deadline_ms));
    admit(&mut reg, r, |p| &mut p.prompt_segments)?;
    reg.prompts.insert(name, Callback { function, deadline });
    Ok(())
}

/// `quirl.completion.add_provider{…}`.
fn add_completion_provider(lua: &Lua, state: &SdkState, spec: Table) -> mlua::Result<()> {
    state.capabilities.require("completion.register")?;
    let (r, complete) = read_spec(
        lua,
        &spec,
        "complete",
        "completion provider",
        records_from_lua::completion_registration,
        quirl_lua_protocol::records::CompletionRegistration::check,
    )?;
    let function = lua.create_registry_value(complete)?;
    let mut reg = state.registry()?;
    let command = r.command.clone();
    admit(&mut reg, r, |p| &mut p.completion_providers)?;
    reg.completions.insert(command, function);
    Ok(())
}

/// `quirl.plugin.command{…}`.
fn add_plugin_command(lua: &Lua, state: &SdkState, spec: Table) -> mlua::Result<()> {
    state.capabilities.require("commands.register")?;
    let (r, run) = read_spec(
        lua,
        &spec,
        "run",
        "plugin command",
        records_from_lua::command_registration,
        quirl_lua_protocol::records::CommandRegistration::check,
    )?;
    let function = lua.create_registry_value(run)?;
    let mut reg = state.registry()?;
    let name = r.name.clone();
    admit(&mut reg, r, |p| &mut p.commands)?;
    reg.commands.insert(name, function);
    Ok(())
}

/// `quirl.events.subscribe{…}`: also needs the grant of every capability
/// the subscription asks for.
fn subscribe_to_events(lua: &Lua, state: &SdkState, spec: Table) -> mlua::Result<()> {
    state.capabilities.require("events.observe")?;
    let (r, observe) = read_spec(
        lua,
        &spec,
        "observe",
        "event subscription",
        records_from_lua::event_subscription,
        quirl_lua_protocol::records::EventSubscription::check,
    )?;
    for capability in &r.capabilities {
        state
            .capabilities
            .require(grants::capability_grant(*capability))?;
    }
    let function = lua.create_registry_value(observe)?;
    let mut reg = state.registry()?;
    let name = r.name.clone();
    let callback = EventCallback {
        callback: Callback {
            function,
            deadline: Duration::from_millis(r.deadline_ms),
        },
        events: r.events.clone(),
        capabilities: r.capabilities.clone(),
    };
    admit(&mut reg, r, |p| &mut p.events)?;
    reg.events.insert(name, callback);
    Ok(())
}

/// `quirl.extension.contribute{…}`: also needs the grant of the
/// contribution's kind.
fn add_extension_contribution(lua: &Lua, state: &SdkState, spec: Table) -> mlua::Result<()> {
    state.capabilities.require("extension.contribute")?;
    let (r, provide) = read_spec(
        lua,
        &spec,
        "provide",
        "extension contribution",
        records_from_lua::contribution_registration,
        quirl_lua_protocol::records::ContributionRegistration::check,
    )?;
    state
        .capabilities
        .require(grants::contribution_grant(r.kind))?;
    let function = lua.create_registry_value(provide)?;
    let mut reg = state.registry()?;
    let key: (ContributionKind, String) = (r.kind, r.name.clone());
    let deadline = Duration::from_millis(r.deadline_ms);
    admit(&mut reg, r, |p| &mut p.contributions)?;
    reg.contributions
        .insert(key, Callback { function, deadline });
    Ok(())
}

fn process_run(lua: &Lua, state: &SdkState, command: String) -> mlua::Result<Table> {
    let meter = &state.meter;
    meter.guard()?;
    let capabilities = &state.capabilities;
    if !capabilities.allow_process || !process_granted(&capabilities.grants, &command) {
        return Err(mlua::Error::runtime("capability denied: process.spawn"));
    }
    if !capabilities.process_enabled {
        return Err(mlua::Error::runtime(
            "process host is unavailable; run Lua through the Quirl CLI or configure a process host",
        ));
    }
    meter.check_clock()?;
    let remaining = meter.remaining();
    if remaining.is_zero() {
        return Err(meter.trip_limit(LimitTrip::WallTime {
            elapsed_ms: 0,
            limit_ms: 0,
        }));
    }
    if command.len() > HOST_COMMAND_BYTES_MAX {
        return Err(mlua::Error::external(
            OpError::resource_limit("quirl.process.run command exceeds its byte limit")
                .with_context(format!(
                    "observed: {}; limit: {HOST_COMMAND_BYTES_MAX}",
                    command.len()
                ))
                .with_help("Reduce the guest process command"),
        ));
    }
    let calls = state.host_calls.fetch_add(1, Ordering::Relaxed) + 1;
    if calls > HOST_CALLS_PER_REQUEST_MAX {
        // A budget like every other: sticky, so `pcall` cannot swallow it and
        // the request ends with a `resource_limit` error.
        return Err(meter.trip_limit(LimitTrip::HostCalls {
            observed: calls,
            limit: HOST_CALLS_PER_REQUEST_MAX,
        }));
    }
    let deadline_ms = u64::try_from(remaining.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
    let request = HostRequest {
        command,
        deadline_ms: deadline_ms.max(1),
        max_output_bytes: HOST_OUTPUT_BYTES_MAX,
    };
    let reply = {
        let mut host = state
            .host
            .lock()
            .map_err(|_| mlua::Error::runtime("process host is unavailable"))?;
        match host.as_mut() {
            Some(host) => host.call(request),
            None => {
                return Err(mlua::Error::runtime(
                    "process host is unavailable; run Lua through the Quirl CLI or configure a process host",
                ));
            }
        }
    };
    let outcome = match reply {
        HostReply::Outcome(outcome) => outcome,
        HostReply::Violation(reason) => return Err(meter.trip(Stop::Violation(reason))),
        HostReply::Error(error) if error.code == crate::error::ErrorCode::ResourceLimit => {
            return Err(meter.trip_limit(LimitTrip::Host(error)));
        }
        HostReply::Error(error) => return Err(mlua::Error::external(error)),
    };
    // The session has already checked each stream against the call's
    // `max_output_bytes` (a violation otherwise, which never reaches here).
    meter.check_clock()?;
    let result = lua.create_table()?;
    let ok = outcome.status == 0;
    result.set("ok", ok)?;
    result.set("status", outcome.status)?;
    result.set("value", outcome.stdout.unwrap_or_default())?;
    result.set("stderr", outcome.stderr.unwrap_or_default())?;
    if !ok {
        let error = OpError::new(
            crate::error::ErrorCode::InvalidCommand,
            "process invoked from Lua exited with a non-zero status",
        )
        .with_context(format!("exit status: {}", outcome.status))
        .with_help("Inspect `stderr` and handle the status explicitly")
        .with_exit_status(outcome.status);
        let mut json = error.to_json();
        if let Some(map) = json.as_object_mut() {
            map.remove("command");
        }
        result.set("error", crate::convert::to_lua(lua, &json)?)?;
    }
    Ok(result)
}
