//! Typed operations: each operation of v1 (SPEC §7.1) as a type that names
//! its result (§7.2), so that a client call returns that result and no
//! caller matches an [`OperationResult`] variant the crate already checked.
//!
//! `ParentClient::call`, `call_with_host` and the tokio adapter's calls take
//! any [`TypedOperation`]: one of the types below, answered with its own
//! output, or a plain [`Operation`], answered with the [`OperationResult`]
//! the session checked against it.
//!
//! | type | result |
//! |---|---|
//! | [`Initialize`] | `()` |
//! | [`Eval`], [`Complete`], [`Contribution`] | [`serde_json::Value`] |
//! | [`Check`] | `Option<`[`CheckReport`]`>` (`None`: `null`) |
//! | [`LoadConfig`] | [`QuirlConfig`] |
//! | [`LoadPlugin`] | [`PluginRegistrations`] |
//! | [`RenderPrompt`] | `Option<String>` |
//! | [`Run`], [`PluginCommand`] | [`ExecutionOutcome`] |
//! | [`Event`] | `Vec<`[`EventHandlerReport`]`>` |
//! | [`Test`] | `u64` (the number of tests) |
//!
//! ```no_run
//! use quirl_lua_protocol::blocking::ParentClient;
//! use quirl_lua_protocol::operations::{Eval, Initialize};
//! use quirl_lua_protocol::records::Policy;
//! # fn demo(worker: &mut ParentClient<std::process::ChildStderr, std::process::ChildStdin>) -> Result<(), Box<dyn std::error::Error>> {
//! worker.call(Initialize::new(Policy::quirl_config_profile()))??;
//! let answer: serde_json::Value = worker.call(Eval::new("return 6 * 7"))??;
//! assert_eq!(answer, 42);
//! # Ok(()) }
//! ```

use crate::error::{ErrorKind, ProtocolError};
use crate::records::{
    CheckReport, ContributionKind, EventHandlerReport, ExecutionContext, ExecutionOutcome,
    ExtensionEvent, Operation, OperationKind, OperationResult, PluginRegistrations, Policy,
    QuirlConfig,
};
use serde_json::Value;

/// An operation whose answer has a known type (see the
/// [module docs](self)); sealed.
pub trait TypedOperation: sealed::Sealed {
    /// What a successful answer carries.
    type Output;

    /// The operation to send.
    fn into_operation(self) -> Operation;

    /// The output, taken out of the result the session checked against the
    /// operation (SPEC §7.2). A result of another operation's shape cannot
    /// reach it; if it did, the error is `wrong_type`.
    fn output(result: OperationResult) -> Result<Self::Output, ProtocolError>;
}

mod sealed {
    /// Only the operations of v1 are typed operations.
    pub trait Sealed {}
}

/// A result that is not the shape `kind` answers (the session rules it out).
fn mismatch(kind: OperationKind, result: &OperationResult) -> ProtocolError {
    ProtocolError::new(
        ErrorKind::WrongType,
        format!(
            "the result {result:?} is not the result of {}",
            kind.as_str()
        ),
    )
}

impl sealed::Sealed for Operation {}

/// Any operation, answered with the [`OperationResult`] the session
/// checked against it.
impl TypedOperation for Operation {
    type Output = OperationResult;

    fn into_operation(self) -> Operation {
        self
    }

    fn output(result: OperationResult) -> Result<OperationResult, ProtocolError> {
        Ok(result)
    }
}

/// Declares a typed operation: the struct, its `From` into [`Operation`]
/// and its [`TypedOperation`] impl, given the variant its result comes in.
macro_rules! typed_operation {
    (
        $(#[$doc:meta])*
        $name:ident -> $output:ty, $kind:ident { $( $(#[$field_doc:meta])* $field:ident : $field_ty:ty ),* $(,)? }
        result $( $pattern:pat => $value:expr ),+ $(,)?
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name {
            $( $(#[$field_doc])* pub $field: $field_ty, )*
        }

        impl From<$name> for Operation {
            fn from(typed: $name) -> Operation {
                Operation::$kind { $( $field: typed.$field, )* }
            }
        }

        impl sealed::Sealed for $name {}

        impl TypedOperation for $name {
            type Output = $output;

            fn into_operation(self) -> Operation {
                self.into()
            }

            fn output(result: OperationResult) -> Result<$output, ProtocolError> {
                match result {
                    $( $pattern => Ok($value), )+
                    other => Err(mismatch(OperationKind::$kind, &other)),
                }
            }
        }
    };
}

typed_operation! {
    /// `initialize` (SPEC §7.1): the descriptor, the policy, the grants and
    /// whether host calls are enabled; answered with `()`.
    Initialize -> (), Initialize {
        /// Must equal [`LUA_WORKER_PROTOCOL_DESCRIPTOR`](crate::LUA_WORKER_PROTOCOL_DESCRIPTOR);
        /// [`Initialize::new`] sets it.
        protocol_descriptor: String,
        /// The resource policy (SPEC §10).
        policy: Policy,
        /// Capability grants (`None`: `grants: null`, no grant).
        grants: Option<Vec<String>>,
        /// Whether `quirl.process.run` may send host calls.
        process_enabled: bool,
    }
    result OperationResult::Null => ()
}

impl Initialize {
    /// `initialize` with `policy`, no grants (`grants: null`) and host
    /// calls disabled; see [`grants`](Self::grants) and
    /// [`process_enabled`](Self::process_enabled).
    pub fn new(policy: Policy) -> Self {
        Self {
            protocol_descriptor: crate::LUA_WORKER_PROTOCOL_DESCRIPTOR.to_owned(),
            policy,
            grants: None,
            process_enabled: false,
        }
    }

    /// Send these grants (a list, possibly empty, instead of `null`).
    #[must_use]
    pub fn grants<I: IntoIterator<Item = S>, S: Into<String>>(mut self, grants: I) -> Self {
        self.grants = Some(grants.into_iter().map(Into::into).collect());
        self
    }

    /// Enable or disable host calls (`process_enabled`; the policy's
    /// `allow_process` must allow them too, SPEC §9.2).
    #[must_use]
    pub fn process_enabled(mut self, enabled: bool) -> Self {
        self.process_enabled = enabled;
        self
    }
}

typed_operation! {
    /// `eval`: run a chunk; answered with its free-form return value.
    Eval -> Value, Eval {
        /// Lua source.
        source: String,
    }
    result OperationResult::Value(value) => value
}

impl Eval {
    /// `eval` of `source`.
    pub fn new(source: impl Into<String>) -> Self {
        Self {
            source: source.into(),
        }
    }
}

typed_operation! {
    /// `check`: compile without running (SPEC §7.1); answered with `None`
    /// (`null`: it compiles, Quirl 0.1's wire) or, where the session granted
    /// `check.diagnostics`, with the report (SPEC §7.2).
    Check -> Option<CheckReport>, Check {
        /// Lua source.
        source: String,
        /// Name used in diagnostics.
        source_name: String,
    }
    result
        OperationResult::Null => None,
        OperationResult::CheckReport(report) => Some(report),
}

typed_operation! {
    /// `load_config`: evaluate a configuration; answered with it.
    LoadConfig -> QuirlConfig, LoadConfig {
        /// Lua source.
        source: String,
        /// Name used in diagnostics.
        source_name: String,
    }
    result OperationResult::Config(config) => config
}

typed_operation! {
    /// `load_plugin`: load a plugin; answered with its registrations.
    LoadPlugin -> PluginRegistrations, LoadPlugin {
        /// Lua source.
        source: String,
        /// Name used in diagnostics.
        source_name: String,
    }
    result OperationResult::Plugin(plugin) => plugin
}

typed_operation! {
    /// `render_prompt`: render a segment; answered with its text or `None`.
    RenderPrompt -> Option<String>, RenderPrompt {
        /// Segment name.
        name: String,
        /// Free-form context.
        context: Value,
    }
    result OperationResult::Prompt(prompt) => prompt
}

typed_operation! {
    /// `complete`: ask a completion provider; answered with its items.
    Complete -> Value, Complete {
        /// Command path.
        command: String,
        /// Free-form context.
        context: Value,
    }
    result OperationResult::Value(value) => value
}

typed_operation! {
    /// `contribution`: invoke a contribution; answered with its value.
    Contribution -> Value, Contribution {
        /// Surface.
        kind: ContributionKind,
        /// Contribution name.
        name: String,
        /// Free-form context.
        context: Value,
    }
    result OperationResult::Value(value) => value
}

typed_operation! {
    /// `run`: run a runner module; answered with its outcome.
    Run -> ExecutionOutcome, Run {
        /// Lua source.
        source: String,
        /// Name used in diagnostics.
        source_name: String,
        /// Execution context.
        context: ExecutionContext,
    }
    result OperationResult::Outcome(outcome) => outcome
}

typed_operation! {
    /// `plugin_command`: run a plugin command; answered with its outcome.
    PluginCommand -> ExecutionOutcome, PluginCommand {
        /// Command name.
        name: String,
        /// Execution context.
        context: ExecutionContext,
        /// Remaining deadline in ms (at least 1).
        deadline_ms: u64,
    }
    result OperationResult::Outcome(outcome) => outcome
}

typed_operation! {
    /// `event`: dispatch an extension event; answered with one report per
    /// handler.
    Event -> Vec<EventHandlerReport>, Event {
        /// The event.
        event: ExtensionEvent,
    }
    result OperationResult::Reports(reports) => reports
}

typed_operation! {
    /// `test`: run a test file; answered with the number of tests run.
    Test -> u64, Test {
        /// Lua source.
        source: String,
        /// Name used in diagnostics.
        source_name: String,
    }
    result OperationResult::TestCount(count) => count
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn each_typed_operation_is_its_operation_and_takes_only_its_result() {
        let eval = Eval::new("return 1");
        assert_eq!(
            eval.clone().into_operation(),
            Operation::Eval {
                source: "return 1".into()
            }
        );
        assert_eq!(Eval::output(OperationResult::Value(7.into())).unwrap(), 7);
        let wrong = Eval::output(OperationResult::TestCount(1)).unwrap_err();
        assert_eq!(wrong.kind(), ErrorKind::WrongType);
        assert_eq!(Test::output(OperationResult::TestCount(3)).unwrap(), 3);
        assert_eq!(Check::output(OperationResult::Null).unwrap(), None);
        let report = CheckReport {
            diagnostics: Vec::new(),
        };
        assert_eq!(
            Check::output(OperationResult::CheckReport(report.clone())).unwrap(),
            Some(report)
        );
        let wrong = Check::output(OperationResult::TestCount(1)).unwrap_err();
        assert_eq!(wrong.kind(), ErrorKind::WrongType);
        let init = Initialize::new(Policy::quirl_config_profile())
            .grants(["process.spawn:echo"])
            .process_enabled(true);
        assert_eq!(
            init.into_operation(),
            Operation::initialize(
                Policy::quirl_config_profile(),
                Some(vec!["process.spawn:echo".into()]),
                true
            )
        );
        assert_eq!(
            Operation::output(OperationResult::Null).unwrap(),
            OperationResult::Null
        );
    }
}
