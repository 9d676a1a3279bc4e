//! `quirl-lua batch`: JSON lines in, one supervised worker, JSON lines out.
//!
//! Each input line is one operation object; each produces exactly one
//! output line, `{"ok":true,"result":…}` or
//! `{"ok":false,"kind":"…","error":{…}}`, in order:
//!
//! | `op` | fields |
//! |---|---|
//! | `eval` | `source` |
//! | `check`, `test`, `load_plugin` | `source` (with optional `name`) or `file` |
//! | `run` | `source`/`name` or `file`, optional `args` (strings) |
//! | `prompt` | `name`, optional `context` |
//! | `complete` | `command`, optional `context` |
//! | `command` | `name`, optional `args` |
//! | `event` | `event` (an extension event object) |
//!
//! All lines run on one worker, so globals and plugin registrations persist
//! from line to line. A line that cannot be parsed is answered with an
//! `invalid_input` error without touching the worker. Once the worker has
//! failed (deadline, crash, violation), every later line is answered with an
//! `unavailable` error at once; restarting is the lifecycle layer's job
//! (issue 6). Lines longer than [`LINE_BYTES_MAX`] are rejected. The exit
//! status is 0 when every line succeeded, otherwise that of the first
//! failing line.

use std::io::{BufRead, Read};
use std::time::Duration;

use quirl_lua_reference_parent::{Error, Worker, WorkerConfig};
use serde_json::Value;

use super::{
    EXIT_OK, EXIT_USAGE, Failure, empty_context, event_from_value, execution_context, exit_code,
    read_source,
};
use crate::cli::render;

/// Longest accepted input line: a maximal source, JSON-escaped, plus room.
pub(crate) const LINE_BYTES_MAX: usize = 16 * 1024 * 1024;

pub(crate) fn run(config: WorkerConfig) -> Result<(), Failure> {
    let mut worker = Worker::spawn(config)?;
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut first_failure = EXIT_OK;
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = input
            .by_ref()
            .take(u64::try_from(LINE_BYTES_MAX).unwrap_or(u64::MAX))
            .read_until(b'\n', &mut line)
            .map_err(|error| Failure::Usage(format!("cannot read stdin: {error}")))?;
        if read == 0 {
            break;
        }
        let (record, status) = if line.len() >= LINE_BYTES_MAX && !line.ends_with(b"\n") {
            skip_rest_of_line(&mut input)?;
            let message = format!("line longer than {LINE_BYTES_MAX} bytes");
            (render::usage_record(&message), EXIT_USAGE)
        } else if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        } else {
            match run_line(&mut worker, &line) {
                Ok(value) => (render::ok_record(&value), EXIT_OK),
                Err(Failure::Worker(error)) => (render::error_record(&error), exit_code(&error)),
                Err(Failure::Usage(message)) => (render::usage_record(&message), EXIT_USAGE),
                Err(Failure::Status(value, status)) => (render::ok_record(&value), status),
                Err(Failure::Silent(status)) => (render::usage_record("no result"), status),
            }
        };
        render::print_stdout_line(&record);
        if first_failure == EXIT_OK {
            first_failure = status;
        }
    }
    if first_failure == EXIT_OK {
        Ok(())
    } else {
        Err(Failure::Silent(first_failure))
    }
}

fn skip_rest_of_line(input: &mut impl BufRead) -> Result<(), Failure> {
    loop {
        let mut chunk = Vec::new();
        let read = input
            .by_ref()
            .take(64 * 1024)
            .read_until(b'\n', &mut chunk)
            .map_err(|error| Failure::Usage(format!("cannot read stdin: {error}")))?;
        if read == 0 || chunk.ends_with(b"\n") {
            return Ok(());
        }
    }
}

fn run_line(worker: &mut Worker, line: &[u8]) -> Result<Value, Failure> {
    let request: Value = serde_json::from_slice(line)
        .map_err(|error| Failure::Usage(format!("line is not JSON: {error}")))?;
    let Some(op) = request.get("op").and_then(Value::as_str) else {
        return Err(Failure::Usage("line has no string field `op`".to_owned()));
    };
    let text = |field: &str| -> Result<String, Failure> {
        request
            .get(field)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| Failure::Usage(format!("`{op}` needs a string field `{field}`")))
    };
    let context = || {
        request
            .get("context")
            .cloned()
            .unwrap_or_else(empty_context)
    };
    let args = || -> Result<Vec<String>, Failure> {
        match request.get("args") {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| Failure::Usage("`args` must be strings".to_owned()))
                })
                .collect(),
            Some(_) => Err(Failure::Usage("`args` must be an array".to_owned())),
        }
    };
    // `source` + optional `name`, or `file`.
    let source = || -> Result<(String, String), Failure> {
        if let Some(file) = request.get("file").and_then(Value::as_str) {
            let path = std::path::Path::new(file);
            return Ok((read_source(path)?, file.to_owned()));
        }
        let name = request
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("batch")
            .to_owned();
        Ok((text("source")?, name))
    };
    let result: Result<Value, Error> = match op {
        "eval" => worker.eval(&text("source")?),
        "check" => {
            let (source, name) = source()?;
            worker.check(&source, &name).map(|()| Value::Null)
        }
        "test" => {
            let (source, name) = source()?;
            worker.test(&source, &name).map(Value::from)
        }
        "load_plugin" => {
            let (source, name) = source()?;
            return worker
                .load_plugin(&source, &name)
                .map_err(Failure::Worker)
                .and_then(|registrations| super::to_json(&registrations));
        }
        "run" => {
            let (source, name) = source()?;
            let context = execution_context(&args()?)?;
            return worker
                .run(&source, &name, context)
                .map_err(Failure::Worker)
                .and_then(|outcome| super::outcome_value(&outcome));
        }
        "prompt" => worker
            .render_prompt(&text("name")?, context())
            .map(|text| text.map_or(Value::Null, Value::String)),
        "complete" => worker.complete(&text("command")?, context()),
        "command" => {
            let context = execution_context(&args()?)?;
            let timeout = Duration::from_millis(worker.policy().wall_time_ms());
            return worker
                .plugin_command(&text("name")?, context, timeout)
                .map_err(Failure::Worker)
                .and_then(|outcome| super::outcome_value(&outcome));
        }
        "event" => {
            let event = request
                .get("event")
                .ok_or_else(|| Failure::Usage("`event` needs a field `event`".to_owned()))?;
            let event = event_from_value(event).map_err(Failure::Usage)?;
            return worker
                .event(event)
                .map_err(Failure::Worker)
                .and_then(|reports| super::to_json(&reports));
        }
        other => return Err(Failure::Usage(format!("unknown op `{other}`"))),
    };
    result.map_err(Failure::Worker)
}
