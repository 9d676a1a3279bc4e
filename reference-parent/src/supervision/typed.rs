//! The typed requests of every driver (the blocking [`Worker`] and the
//! tokio one): each builds its operation, says which deadline it runs
//! under (the request's, or a callback's declared one plus the slack,
//! DESIGN §17.6), and takes its result out of the answer. The drivers only
//! run them, so they offer the same shortcuts with the same rules.
//!
//! [`Worker`]: crate::Worker

use std::time::Duration;

use quirl_lua_protocol::ErrorContext;
use quirl_lua_protocol::records::{
    CheckReport, ContributionKind, ErrorCode, EventHandlerReport, ExecutionContext,
    ExecutionOutcome, ExtensionEvent, Operation, OperationResult, PluginRegistrations, QuirlConfig,
};
use serde_json::Value;

use crate::callback_deadline::{COMPLETION_DEADLINE, CallbackDeadlines};
use crate::error::{Error, ErrorClass};

/// The deadline a typed request runs under.
pub(crate) enum Under {
    /// The policy's wall time from sending.
    Request,
    /// A callback's declared deadline plus the slack (`None`: no
    /// declaration known, the request's own deadline applies).
    Callback(Option<Duration>),
}

/// One typed request: the operation, its deadline, and the result it
/// expects (`Err` gives back any other result, boxed: results are large).
pub(crate) struct Typed<T> {
    pub(crate) operation: Operation,
    pub(crate) under: Under,
    pub(crate) take: fn(OperationResult) -> Result<T, Box<OperationResult>>,
}

/// The error for a result of the wrong kind. Unreachable in practice: the
/// session decodes each result for the operation in flight; a typed error
/// (and the worker's kill, by the caller) rather than a panic.
pub(crate) fn mis_shaped(result: &OperationResult) -> Error {
    Error::new(
        ErrorClass::ProtocolViolation,
        ErrorCode::Validation,
        "the Lua worker's result does not fit the operation",
    )
    .with_context(format!("result: {result:?}"))
}

fn value(result: OperationResult) -> Result<Value, Box<OperationResult>> {
    match result {
        OperationResult::Value(value) => Ok(value),
        other => Err(Box::new(other)),
    }
}

fn outcome(result: OperationResult) -> Result<ExecutionOutcome, Box<OperationResult>> {
    match result {
        OperationResult::Outcome(outcome) => Ok(outcome),
        other => Err(Box::new(other)),
    }
}

pub(crate) fn eval(source: &str) -> Typed<Value> {
    Typed {
        operation: Operation::Eval {
            source: source.to_owned(),
        },
        under: Under::Request,
        take: value,
    }
}

/// `null` (no report negotiated, or nothing found by a worker that did not
/// take the grant) is an empty report (SPEC §7.2).
pub(crate) fn check(source: &str, source_name: &str) -> Typed<CheckReport> {
    Typed {
        operation: Operation::Check {
            source: source.to_owned(),
            source_name: source_name.to_owned(),
        },
        under: Under::Request,
        take: |result| match result {
            OperationResult::Null => Ok(CheckReport::default()),
            OperationResult::CheckReport(report) => Ok(report),
            other => Err(Box::new(other)),
        },
    }
}

pub(crate) fn load_config(source: &str, source_name: &str) -> Typed<QuirlConfig> {
    Typed {
        operation: Operation::LoadConfig {
            source: source.to_owned(),
            source_name: source_name.to_owned(),
        },
        under: Under::Request,
        take: |result| match result {
            OperationResult::Config(config) => Ok(config),
            other => Err(Box::new(other)),
        },
    }
}

/// The caller keeps the registrations' callback deadlines
/// ([`CallbackDeadlines::new`]).
pub(crate) fn load_plugin(source: &str, source_name: &str) -> Typed<PluginRegistrations> {
    Typed {
        operation: Operation::LoadPlugin {
            source: source.to_owned(),
            source_name: source_name.to_owned(),
        },
        under: Under::Request,
        take: |result| match result {
            OperationResult::Plugin(registrations) => Ok(registrations),
            other => Err(Box::new(other)),
        },
    }
}

pub(crate) fn render_prompt(
    callbacks: &CallbackDeadlines,
    name: &str,
    context: Value,
) -> Typed<Option<String>> {
    Typed {
        under: Under::Callback(callbacks.prompt(name)),
        operation: Operation::RenderPrompt {
            name: name.to_owned(),
            context,
        },
        take: |result| match result {
            OperationResult::Prompt(text) => Ok(text),
            other => Err(Box::new(other)),
        },
    }
}

pub(crate) fn complete(command: &str, context: Value) -> Typed<Value> {
    Typed {
        operation: Operation::Complete {
            command: command.to_owned(),
            context,
        },
        under: Under::Callback(Some(COMPLETION_DEADLINE)),
        take: value,
    }
}

pub(crate) fn contribution(
    callbacks: &CallbackDeadlines,
    kind: ContributionKind,
    name: &str,
    context: Value,
) -> Typed<Value> {
    Typed {
        under: Under::Callback(callbacks.contribution(kind, name)),
        operation: Operation::Contribution {
            kind,
            name: name.to_owned(),
            context,
        },
        take: value,
    }
}

pub(crate) fn run(
    source: &str,
    source_name: &str,
    context: ExecutionContext,
) -> Typed<ExecutionOutcome> {
    Typed {
        operation: Operation::Run {
            source: source.to_owned(),
            source_name: source_name.to_owned(),
            context,
        },
        under: Under::Request,
        take: outcome,
    }
}

/// `timeout` is the command's own deadline (`deadline_ms`, sent to the
/// worker); the parent kills the worker at that deadline plus the callback
/// slack (DESIGN §17.6).
pub(crate) fn plugin_command(
    name: &str,
    context: ExecutionContext,
    timeout: Duration,
) -> Typed<ExecutionOutcome> {
    let deadline_ms = u64::try_from(timeout.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    Typed {
        operation: Operation::PluginCommand {
            name: name.to_owned(),
            context,
            deadline_ms,
        },
        under: Under::Callback(Some(Duration::from_millis(deadline_ms))),
        take: outcome,
    }
}

pub(crate) fn event(
    callbacks: &CallbackDeadlines,
    event: ExtensionEvent,
) -> Typed<Vec<EventHandlerReport>> {
    Typed {
        under: Under::Callback(callbacks.event(&event)),
        operation: Operation::Event { event },
        take: |result| match result {
            OperationResult::Reports(reports) => Ok(reports),
            other => Err(Box::new(other)),
        },
    }
}

pub(crate) fn test(source: &str, source_name: &str) -> Typed<u64> {
    Typed {
        operation: Operation::Test {
            source: source.to_owned(),
            source_name: source_name.to_owned(),
        },
        under: Under::Request,
        take: |result| match result {
            OperationResult::TestCount(count) => Ok(count),
            other => Err(Box::new(other)),
        },
    }
}
