//! The parameters of each function of the `quirl` table (DESIGN §15.9), for
//! the arity rule.
//!
//! A Lua function's arity cannot be read from the running sandbox (the SDK
//! functions are Rust closures), so this table is written by hand; the test
//! `lint_environment::sdk_signatures_cover_exactly_the_sdk_functions` keeps
//! it equal to the functions the sandbox's `quirl` table holds, and
//! `lint_environment::sdk_calls_fail_without_their_arguments` shows that
//! each function fails without its arguments and ignores extra ones (so
//! too few arguments is an error, too many a warning).

/// One SDK function and its parameters (each required).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    /// The dotted path (`quirl.process.run`).
    pub path: &'static str,
    /// Parameter names, in order.
    pub parameters: &'static [&'static str],
}

/// Every function of the `quirl` table.
pub const SDK_SIGNATURES: &[Signature] = &[
    Signature {
        path: "quirl.cwd",
        parameters: &[],
    },
    Signature {
        path: "quirl.config",
        parameters: &["config"],
    },
    Signature {
        path: "quirl.process.run",
        parameters: &["command"],
    },
    Signature {
        path: "quirl.prompt.add_segment",
        parameters: &["segment"],
    },
    Signature {
        path: "quirl.completion.add_provider",
        parameters: &["provider"],
    },
    Signature {
        path: "quirl.plugin.command",
        parameters: &["command"],
    },
    Signature {
        path: "quirl.events.subscribe",
        parameters: &["subscription"],
    },
    Signature {
        path: "quirl.extension.contribute",
        parameters: &["contribution"],
    },
];

/// The signature of the SDK function at `path`, if it is one.
pub fn signature(path: &str) -> Option<&'static Signature> {
    SDK_SIGNATURES
        .iter()
        .find(|signature| signature.path == path)
}
