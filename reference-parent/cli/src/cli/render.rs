//! How results and errors are printed.
//!
//! Results: compact JSON on stdout (`quirl-lua eval 'return 6 * 7'` prints
//! `42`); with `--json`, `{"ok":true,"result":…}`. Errors: on stderr for
//! people,
//!
//! ```text
//! error[resource_limit]: the Lua request exceeded its deadline
//!   context: deadline 5000 ms after request 2 (eval) started
//!   help: reduce the work or give the request more time (the policy's wall_time_ms, or the call's deadline); the worker was killed
//!   help: the wall time is --wall-time-ms
//! ```
//!
//! or, with `--json`, `{"ok":false,"kind":"deadline","error":{…record…}}` on
//! stdout.

use std::io::Write;

use quirl_lua_protocol::records::{ErrorCode, ShellError};
use quirl_lua_reference_parent::{Error, ErrorClass};
use serde::Serialize;
use serde_json::Value;

/// One output line of `--json` and `batch`: `ok` first, then the result, or
/// the error kind and record (record fields in wire order).
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum Line {
    /// `{"ok":true,"result":…}`
    Ok {
        /// Always true.
        ok: bool,
        /// The operation's result.
        result: Value,
    },
    /// `{"ok":false,"kind":"…","error":{…}}`
    Err {
        /// Always false.
        ok: bool,
        /// The parent's error class (`guest`, `deadline`, `protocol_violation`, …).
        kind: &'static str,
        /// The v1 error record.
        error: Box<ShellError>,
    },
}

/// The JSON line for a successful result (`--json` and batch form).
pub(crate) fn ok_record(value: &Value) -> Line {
    Line::Ok {
        ok: true,
        result: value.clone(),
    }
}

/// The JSON line for an error (`--json` and batch form).
pub(crate) fn error_record(error: &Error) -> Line {
    Line::Err {
        ok: false,
        kind: error.class().as_str(),
        error: Box::new(error.record().clone()),
    }
}

/// The JSON line for a usage error (`--json` and batch form).
pub(crate) fn usage_record(message: &str) -> Line {
    let mut record = ShellError::new(ErrorCode::InvalidArgument, message);
    record.help.push("see quirl-lua --help".to_owned());
    Line::Err {
        ok: false,
        kind: "invalid_input",
        error: Box::new(record),
    }
}

pub(crate) fn print_result(value: &Value, json: bool) {
    if json {
        print_stdout_line(&ok_record(value));
    } else {
        print_stdout_line(value);
    }
}

pub(crate) fn print_error(error: &Error, json: bool) {
    if json {
        print_stdout_line(&error_record(error));
        return;
    }
    let record = error.record();
    let mut text = format!("error[{}]: {}\n", record.code, record.message);
    for label in &record.labels {
        text.push_str(&format!(
            "  at bytes {}..{}: {}\n",
            label.start, label.end, label.message
        ));
    }
    for context in &record.context {
        text.push_str(&format!("  context: {context}\n"));
    }
    if let Some(command) = &record.command {
        text.push_str(&format!("  command: {command}\n"));
    }
    if let Some(status) = record.exit_status {
        text.push_str(&format!("  exit status: {status}\n"));
    }
    for help in &record.help {
        text.push_str(&format!("  help: {help}\n"));
    }
    if error.class() == ErrorClass::Deadline {
        // The library's help names the policy; this is the CLI's knob.
        text.push_str("  help: the wall time is --wall-time-ms\n");
    }
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

pub(crate) fn print_usage_error(message: &str, json: bool) {
    if json {
        print_stdout_line(&usage_record(message));
    } else {
        let _ = writeln!(
            std::io::stderr().lock(),
            "error[invalid_argument]: {message}\n  help: see quirl-lua --help"
        );
    }
}

pub(crate) fn print_stdout_line(value: &impl Serialize) {
    print_stdout_text(&line_text(value));
}

/// `value` as one JSON line's text (without the newline).
pub(crate) fn line_text(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|error| {
        format!(r#"{{"ok":false,"kind":"invalid_input","error":"{error}"}}"#)
    })
}

/// Print a line made by [`line_text`].
pub(crate) fn print_stdout_text(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}
