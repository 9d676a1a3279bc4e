//! `quirl-lua batch`: JSON lines in, a supervised pool of workers, JSON
//! lines out.
//!
//! Each input line is one operation object; each produces exactly one
//! output line, `{"ok":true,"result":…}` or
//! `{"ok":false,"kind":"…","error":{…}}`, in input order:
//!
//! | `op` | fields |
//! |---|---|
//! | `eval` | `source` |
//! | `check`, `test`, `load_plugin`, `config` (`load_config`) | `source` (with optional `name`) or `file` |
//! | `run` | `source`/`name` or `file`, optional `args` (strings), `env` (object of strings), `input` (any JSON value) or `input_bytes` (a string, sent as its UTF-8 bytes) |
//! | `prompt` | `name`, optional `context` |
//! | `complete` | `command`, optional `context` |
//! | `contribution` | `kind` (`catalog`, `completion`, `panel`), `name`, optional `context` |
//! | `command` | `name`, optional `args`, `env`, `input`, `input_bytes` |
//! | `event` | `event` (an extension event object) |
//!
//! Lines run on a [`WorkerPool`] of `--pool N` workers (default 1), or with
//! `--plugin FILE` on a [`PluginHost`] whose workers have all loaded the
//! plugin. With one worker, globals and plugin registrations persist from
//! line to line; with more, lines run concurrently on whichever worker is
//! idle. A worker that fails (deadline, crash, protocol violation) is
//! replaced by a fresh one for the next line, losing its globals, up to
//! `--max-restarts` failures within the lifecycle layer's window; then the
//! pool is quarantined and every later line fails at once with a
//! `quarantined` error (exit status 5). `--stats` prints the pool's stats
//! as one more JSON line after all results.
//!
//! A line that cannot be parsed is answered with an `invalid_input` error
//! without touching a worker. Lines are read strictly: a key given twice
//! in any object of the line, a field no `op` has (a misspelling; the
//! nearest field of the `op` is suggested), a field of another `op` (`env`
//! on `eval`) and `source` or `name` next to `file` are each such an error,
//! naming the key. Lines longer than [`LINE_BYTES_MAX`] are
//! rejected. The exit status is 0 when every line succeeded, otherwise that
//! of the first failing line (in input order).

use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::sync::mpsc::{Receiver, SyncSender, channel, sync_channel};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use quirl_lua_reference_parent::lifecycle::{
    PluginHost, PluginManifest, PoolOptions, PoolStats, ShutdownReport, WorkerPool,
};
use quirl_lua_reference_parent::{Error, Worker, WorkerConfig};
use serde_json::Value;

use super::args::BatchArgs;
use super::{
    CommandInput, EXIT_OK, EXIT_USAGE, Failure, empty_context, event_from_value, execution_context,
    exit_code, parse_kind, read_source, structured_value,
};
use crate::cli::render;
use quirl_lua_protocol::records::ExecutionInput;

/// Longest accepted input line: a maximal source, JSON-escaped, plus room.
pub(crate) const LINE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// How long the pool may take to stop at the end of the batch.
const SHUTDOWN_BOUND: Duration = Duration::from_secs(3);

/// The workers lines run on.
enum Pool {
    Plain(Box<WorkerPool>),
    Plugin(Box<PluginHost>),
}

impl Pool {
    fn start(config: WorkerConfig, options: &BatchArgs) -> Result<Self, Failure> {
        let pool = PoolOptions::new()
            .with_size(usize::from(options.pool))
            .with_max_restarts(options.max_restarts)
            .with_spares(usize::from(options.spares));
        Ok(match &options.plugin {
            None => Self::Plain(Box::new(WorkerPool::start("batch", config, pool)?)),
            Some(file) => {
                let manifest = PluginManifest::new(file.display().to_string(), file)
                    .with_pool(pool)
                    .with_worker_config(config);
                Self::Plugin(Box::new(PluginHost::start(manifest)?))
            }
        })
    }

    fn with_worker<T>(&self, f: impl FnOnce(&mut Worker) -> Result<T, Error>) -> Result<T, Error> {
        match self {
            Self::Plain(pool) => pool.with_worker(f),
            Self::Plugin(host) => host.with_worker(f),
        }
    }

    fn stats(&self) -> PoolStats {
        let mut stats = match self {
            Self::Plain(pool) => pool.stats(),
            Self::Plugin(host) => host.stats(),
        };
        // DESIGN §18.3: the built-in worker's lockdown, which the supervisor
        // library (it supervises any worker) does not know.
        stats.containment.worker_lockdown = Some(super::worker_lockdown());
        stats
    }

    fn shutdown(&self) -> ShutdownReport {
        match self {
            Self::Plain(pool) => pool.shutdown(SHUTDOWN_BOUND),
            Self::Plugin(host) => host.shutdown(SHUTDOWN_BOUND),
        }
    }
}

/// One input line, as read.
enum Input {
    Line(Vec<u8>),
    TooLong,
}

/// One output line (its JSON text) and its exit status.
type Answer = (String, u8);

/// Lines read ahead of the oldest unprinted one, per worker.
const LINES_AHEAD_PER_WORKER: usize = 64;

/// Bytes of answers waiting to be printed above which no new line starts.
const WAITING_BYTES_MAX: usize = 64 * 1024 * 1024;

/// How far reading may run ahead of printing. Answers are printed in input
/// order, so one slow line (a limit trip, a deadline) holds up printing;
/// it must not hold up the other workers, or a batch's slow lines would run
/// one after another (a pool of 2 over lines of which every tenth trips a
/// limit took 1.9 times its parts with a window of 4 lines). So the window
/// is wide in lines and bounded in bytes: a new line starts while fewer
/// than [`LINES_AHEAD_PER_WORKER`] per worker are unprinted and the
/// answers waiting hold at most [`WAITING_BYTES_MAX`]. Memory stays
/// bounded by that, plus one answer per worker and the line being read.
struct Window {
    state: Mutex<WindowState>,
    changed: Condvar,
    lines_max: usize,
}

#[derive(Default)]
struct WindowState {
    /// Lines handed to the workers and not yet printed.
    unprinted: usize,
    /// Bytes of answers that wait for an earlier line.
    waiting_bytes: usize,
    /// The printer is gone: nothing more will be printed.
    closed: bool,
}

impl Window {
    fn new(workers: usize) -> Self {
        Window {
            state: Mutex::new(WindowState::default()),
            changed: Condvar::new(),
            lines_max: workers.max(1) * LINES_AHEAD_PER_WORKER,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WindowState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the window is full: no line may start now.
    fn is_full(&self, state: &WindowState) -> bool {
        state.unprinted >= self.lines_max || state.waiting_bytes > WAITING_BYTES_MAX
    }

    /// Wait until one more line may start; false once the printer is gone.
    fn admit(&self) -> bool {
        let mut state = self.lock();
        while !state.closed && self.is_full(&state) {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if state.closed {
            return false;
        }
        state.unprinted += 1;
        true
    }

    /// An answer of `bytes` waits for an earlier line.
    fn hold(&self, bytes: usize) {
        self.lock().waiting_bytes += bytes;
    }

    /// A held answer of `bytes` was printed.
    fn printed(&self, bytes: usize) {
        let mut state = self.lock();
        state.waiting_bytes = state.waiting_bytes.saturating_sub(bytes);
        state.unprinted = state.unprinted.saturating_sub(1);
        drop(state);
        self.changed.notify_all();
    }

    fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }
}

pub(crate) fn run(config: WorkerConfig, options: &BatchArgs) -> Result<(), Failure> {
    let pool = Pool::start(config, options)?;
    let workers = usize::from(options.pool);
    // Lines go to `workers` threads, answers come back out of order and are
    // printed in order; the window bounds how far reading runs ahead.
    let window = &Window::new(workers);
    let (jobs, job_queue) = sync_channel::<(u64, Input)>(0);
    let job_queue = Mutex::new(job_queue);
    let (answers, answer_queue) = channel::<(u64, Answer)>();
    let outcome = std::thread::scope(|scope| -> Result<u8, Failure> {
        let mut threads = Vec::new();
        for index in 0..workers {
            let (job_queue, answers, pool) = (&job_queue, answers.clone(), &pool);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("quirl-lua-batch-{index}"))
                    .spawn_scoped(scope, move || serve_lines(pool, job_queue, &answers))
                    .map_err(|error| Failure::Usage(format!("cannot start a thread: {error}")))?,
            );
        }
        drop(answers);
        let printer = std::thread::Builder::new()
            .name("quirl-lua-batch-output".to_owned())
            .spawn_scoped(scope, move || {
                let first_failure = print_in_order(&answer_queue, window, options.results);
                window.close();
                first_failure
            })
            .map_err(|error| Failure::Usage(format!("cannot start a thread: {error}")))?;
        let read = read_lines(&jobs, window);
        drop(jobs);
        for thread in threads {
            let _ = thread.join();
        }
        let first_failure = printer.join().unwrap_or(EXIT_USAGE);
        read.map(|()| first_failure)
    });
    // The stats line comes after every result line (the printer is done).
    if options.stats {
        render::print_stdout_line(&pool.stats());
    }
    let report = pool.shutdown();
    if !report.is_clean() {
        for problem in &report.problems {
            eprintln!("quirl-lua: shutdown: {problem}");
        }
    }
    match outcome? {
        EXIT_OK => Ok(()),
        status => Err(Failure::Silent(status)),
    }
}

/// Read stdin line by line and hand each non-blank line to the workers,
/// waiting for the window first.
fn read_lines(jobs: &SyncSender<(u64, Input)>, window: &Window) -> Result<(), Failure> {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut sequence = 0_u64;
    loop {
        let mut line = Vec::new();
        let read = input
            .by_ref()
            .take(u64::try_from(LINE_BYTES_MAX).unwrap_or(u64::MAX))
            .read_until(b'\n', &mut line)
            .map_err(|error| Failure::Usage(format!("cannot read stdin: {error}")))?;
        if read == 0 {
            return Ok(());
        }
        let job = if line.len() >= LINE_BYTES_MAX && !line.ends_with(b"\n") {
            skip_rest_of_line(&mut input)?;
            Input::TooLong
        } else if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        } else {
            Input::Line(line)
        };
        if !window.admit() || jobs.send((sequence, job)).is_err() {
            return Ok(());
        }
        sequence += 1;
    }
}

/// A worker thread: answer lines until the input ends.
fn serve_lines(
    pool: &Pool,
    jobs: &Mutex<Receiver<(u64, Input)>>,
    answers: &std::sync::mpsc::Sender<(u64, Answer)>,
) {
    loop {
        let job = jobs.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok((sequence, input)) = job else {
            return;
        };
        let (line, status) = answer(pool, input);
        if answers
            .send((sequence, (render::line_text(&line), status)))
            .is_err()
        {
            return;
        }
    }
}

fn answer(pool: &Pool, input: Input) -> (render::Line, u8) {
    let line = match input {
        Input::TooLong => {
            let message = format!("line longer than {LINE_BYTES_MAX} bytes");
            return (render::usage_record(&message), EXIT_USAGE);
        }
        Input::Line(line) => line,
    };
    let request = match parse_line(&line) {
        Ok(request) => request,
        Err(message) => return (render::usage_record(&message), EXIT_USAGE),
    };
    // Worker errors go back to the pool (which decides about restarts);
    // usage errors and results are the line's answer.
    let result = pool.with_worker(|worker| match run_line(worker, &request) {
        Err(Failure::Worker(error)) => Err(error),
        other => Ok(other),
    });
    match result {
        Ok(Ok(value)) => (render::ok_record(&value), EXIT_OK),
        Err(error) | Ok(Err(Failure::Worker(error))) => {
            (render::error_record(&error), exit_code(&error))
        }
        Ok(Err(Failure::Usage(message))) => (render::usage_record(&message), EXIT_USAGE),
        Ok(Err(Failure::Status(value, status))) => (render::ok_record(&value), status),
        Ok(Err(Failure::Silent(status))) => (render::usage_record("no result"), status),
    }
}

/// Print answers in input order; return the first failing status.
fn print_in_order(answers: &Receiver<(u64, Answer)>, window: &Window, print: bool) -> u8 {
    let mut waiting = BTreeMap::new();
    let mut next = 0_u64;
    let mut first_failure = EXIT_OK;
    for (sequence, answer) in answers {
        window.hold(answer.0.len());
        waiting.insert(sequence, answer);
        while let Some((text, status)) = waiting.remove(&next) {
            if print {
                render::print_stdout_text(&text);
            }
            if first_failure == EXIT_OK {
                first_failure = status;
            }
            next += 1;
            window.printed(text.len());
        }
    }
    first_failure
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

/// The fields each `op` takes (`op` itself included), in the order the
/// module documentation lists them.
const OPS: &[(&str, &[&str])] = &[
    ("eval", &["op", "source"]),
    ("check", &["op", "source", "name", "file"]),
    ("test", &["op", "source", "name", "file"]),
    ("config", &["op", "source", "name", "file"]),
    ("load_plugin", &["op", "source", "name", "file"]),
    (
        "run",
        &[
            "op",
            "source",
            "name",
            "file",
            "args",
            "env",
            "input",
            "input_bytes",
        ],
    ),
    ("prompt", &["op", "name", "context"]),
    ("complete", &["op", "command", "context"]),
    ("contribution", &["op", "kind", "name", "context"]),
    (
        "command",
        &["op", "name", "args", "env", "input", "input_bytes"],
    ),
    ("event", &["op", "event"]),
];

/// One input line as a JSON object whose fields all belong to its `op`:
/// not JSON, not an object, a key given twice in any object of the line, a
/// missing or unknown `op`, a field no `op` has (a misspelling, with the
/// nearest field of the `op` suggested) and a field of another `op` are
/// each refused with a message naming the key.
fn parse_line(line: &[u8]) -> Result<Value, String> {
    let mut deserializer = serde_json::Deserializer::from_slice(line);
    let request =
        serde::de::DeserializeSeed::deserialize(strict::Strict { path: None }, &mut deserializer)
            .and_then(|value| deserializer.end().map(|()| value))
            .map_err(|error| {
                if error.is_data() {
                    format!("line has a {error}")
                } else {
                    format!("line is not JSON: {error}")
                }
            })?;
    let Value::Object(fields) = &request else {
        return Err("line is not a JSON object".to_owned());
    };
    let op = match fields.get("op") {
        Some(Value::String(op)) => op.as_str(),
        _ => return Err("line has no string field `op`".to_owned()),
    };
    let Some((_, allowed)) = OPS.iter().find(|(name, _)| *name == op) else {
        let ops: Vec<&str> = OPS.iter().map(|(name, _)| *name).collect();
        return Err(format!("unknown op `{op}` (ops: {})", ops.join(", ")));
    };
    for key in fields.keys() {
        if allowed.contains(&key.as_str()) {
            continue;
        }
        let fields_of_op = allowed.join(", ");
        let known = OPS.iter().any(|(_, fields)| fields.contains(&key.as_str()));
        if known {
            return Err(format!(
                "field `{key}` does not apply to `{op}` (its fields: {fields_of_op})"
            ));
        }
        let hint = allowed
            .iter()
            .filter(|field| edit_distance(field, key) <= 2)
            .min_by_key(|field| edit_distance(field, key))
            .map(|field| format!("; did you mean `{field}`?"))
            .unwrap_or_default();
        return Err(format!(
            "unknown field `{key}` for `{op}` (its fields: {fields_of_op}){hint}"
        ));
    }
    if fields.contains_key("file") {
        for other in ["source", "name"] {
            if fields.contains_key(other) {
                return Err(format!(
                    "field `{other}` does not apply with `file` (give `file`, or `source` with an optional `name`)"
                ));
            }
        }
    }
    Ok(request)
}

/// Levenshtein distance of two short field names, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// JSON values as `serde_json` reads them, refusing a key that appears
/// twice in one object (at any depth; `serde_json::Value` would keep the
/// last), named by its path from the line's top level.
mod strict {
    use std::fmt;

    use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Value};

    /// Where a value is: its key or index under its parent.
    pub(super) struct Path<'a> {
        pub(super) parent: Option<&'a Path<'a>>,
        pub(super) step: Step<'a>,
    }

    pub(super) enum Step<'a> {
        Key(&'a str),
        Index(usize),
    }

    impl fmt::Display for Path<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            if let Some(parent) = self.parent {
                parent.fmt(f)?;
                if let Step::Key(_) = self.step {
                    f.write_str(".")?;
                }
            }
            match self.step {
                Step::Key(key) => f.write_str(key),
                Step::Index(index) => write!(f, "[{index}]"),
            }
        }
    }

    /// A value at `path` (`None`: the line itself).
    pub(super) struct Strict<'a> {
        pub(super) path: Option<&'a Path<'a>>,
    }

    impl<'de> DeserializeSeed<'de> for Strict<'_> {
        type Value = Value;

        fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
            deserializer.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Strict<'_> {
        type Value = Value;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }

        fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
            Ok(Value::Bool(value))
        }

        fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
            Ok(Value::from(value))
        }

        fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
            Ok(Value::from(value))
        }

        fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
            Ok(Value::from(value))
        }

        fn visit_str<E>(self, value: &str) -> Result<Value, E> {
            Ok(Value::String(value.to_owned()))
        }

        fn visit_string<E>(self, value: String) -> Result<Value, E> {
            Ok(Value::String(value))
        }

        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            let mut items = Vec::new();
            loop {
                let path = Path {
                    parent: self.path,
                    step: Step::Index(items.len()),
                };
                match seq.next_element_seed(Strict { path: Some(&path) })? {
                    Some(item) => items.push(item),
                    None => return Ok(Value::Array(items)),
                }
            }
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            let mut members = Map::new();
            while let Some(key) = map.next_key::<String>()? {
                let path = Path {
                    parent: self.path,
                    step: Step::Key(&key),
                };
                if members.contains_key(&key) {
                    return Err(A::Error::custom(format!("duplicate key `{path}`")));
                }
                let value = map.next_value_seed(Strict { path: Some(&path) })?;
                members.insert(key, value);
            }
            Ok(Value::Object(members))
        }
    }
}

/// The fields of one batch line, read on demand by the operation.
struct LineFields<'a> {
    op: &'a str,
    request: &'a Value,
}

impl LineFields<'_> {
    fn text(&self, field: &str) -> Result<String, Failure> {
        self.request
            .get(field)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| Failure::Usage(format!("`{}` needs a string field `{field}`", self.op)))
    }

    fn context(&self) -> Value {
        self.request
            .get("context")
            .cloned()
            .unwrap_or_else(empty_context)
    }

    fn args(&self) -> Result<Vec<String>, Failure> {
        match self.request.get("args") {
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
    }

    /// `env`, and `input` or `input_bytes`.
    fn input(&self) -> Result<CommandInput, Failure> {
        let mut command_input = CommandInput::none();
        match self.request.get("env") {
            None => {}
            Some(Value::Object(members)) => {
                for (name, value) in members {
                    let value = value
                        .as_str()
                        .ok_or_else(|| Failure::Usage("`env` values must be strings".to_owned()))?;
                    command_input
                        .environment
                        .insert(name.clone(), value.to_owned());
                }
            }
            Some(_) => return Err(Failure::Usage("`env` must be an object".to_owned())),
        }
        match (self.request.get("input"), self.request.get("input_bytes")) {
            (Some(_), Some(_)) => {
                return Err(Failure::Usage(
                    "give `input` or `input_bytes`, not both".to_owned(),
                ));
            }
            (Some(value), None) => {
                command_input.input = ExecutionInput::Value(structured_value(value.clone()));
            }
            (None, Some(Value::String(text))) => {
                command_input.input = ExecutionInput::Bytes(text.as_bytes().to_vec());
            }
            (None, Some(_)) => {
                return Err(Failure::Usage("`input_bytes` must be a string".to_owned()));
            }
            (None, None) => {}
        }
        Ok(command_input)
    }

    /// `source` + optional `name`, or `file`.
    fn source(&self) -> Result<(String, String), Failure> {
        if let Some(file) = self.request.get("file").and_then(Value::as_str) {
            let path = std::path::Path::new(file);
            return Ok((read_source(path)?, file.to_owned()));
        }
        let name = self
            .request
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("batch")
            .to_owned();
        Ok((self.text("source")?, name))
    }
}

fn run_line(worker: &mut Worker, request: &Value) -> Result<Value, Failure> {
    let Some(op) = request.get("op").and_then(Value::as_str) else {
        return Err(Failure::Usage("line has no string field `op`".to_owned()));
    };
    let line = LineFields { op, request };
    let result: Result<Value, Error> = match op {
        "eval" => worker.eval(&line.text("source")?),
        "check" => {
            let (source, name) = line.source()?;
            worker.check(&source, &name).map(|report| {
                if report.diagnostics.is_empty() {
                    Value::Null
                } else {
                    serde_json::to_value(&report).unwrap_or(Value::Null)
                }
            })
        }
        "test" => {
            let (source, name) = line.source()?;
            worker.test(&source, &name).map(Value::from)
        }
        "config" => {
            let (source, name) = line.source()?;
            return worker
                .load_config(&source, &name)
                .map_err(Failure::Worker)
                .and_then(|config| super::to_json(&config));
        }
        "load_plugin" => {
            let (source, name) = line.source()?;
            return worker
                .load_plugin(&source, &name)
                .map_err(Failure::Worker)
                .and_then(|registrations| super::to_json(&registrations));
        }
        "run" => {
            let (source, name) = line.source()?;
            let context = execution_context(&line.args()?, line.input()?)?;
            return worker
                .run(&source, &name, context)
                .map_err(Failure::Worker)
                .and_then(|outcome| super::outcome_value(&outcome));
        }
        "prompt" => worker
            .render_prompt(&line.text("name")?, line.context())
            .map(|text| text.map_or(Value::Null, Value::String)),
        "complete" => worker.complete(&line.text("command")?, line.context()),
        "contribution" => {
            let kind = parse_kind(&line.text("kind")?)?;
            worker.contribution(kind, &line.text("name")?, line.context())
        }
        "command" => {
            let context = execution_context(&line.args()?, line.input()?)?;
            let timeout = Duration::from_millis(worker.policy().wall_time_ms());
            return worker
                .plugin_command(&line.text("name")?, context, timeout)
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    // One slow line must not hold up the other workers: with 2 workers,
    // 128 lines may be unprinted behind it (a window of 4 ran every tenth
    // line's limit trip one after another).
    #[test]
    fn the_window_admits_lines_per_worker_until_one_is_printed() {
        let window = Window::new(2);
        for _ in 0..2 * LINES_AHEAD_PER_WORKER {
            assert!(!window.is_full(&window.lock()));
            assert!(window.admit());
        }
        assert!(window.is_full(&window.lock()));
        window.hold(10);
        window.printed(10);
        assert!(!window.is_full(&window.lock()));
        assert!(window.admit());
        assert!(window.is_full(&window.lock()));
    }

    // Answers waiting behind a slow line are bounded in bytes, not only in
    // lines: a few huge results stop reading ahead.
    #[test]
    fn the_window_is_full_while_waiting_answers_hold_too_many_bytes() {
        let window = Window::new(4);
        assert!(window.admit());
        window.hold(WAITING_BYTES_MAX + 1);
        assert!(window.is_full(&window.lock()));
        window.printed(WAITING_BYTES_MAX + 1);
        assert!(!window.is_full(&window.lock()));
        assert_eq!(window.lock().unprinted, 0);
    }

    // When the printer is gone, a reader waiting for a full window is let
    // go (it stops reading) instead of waiting forever.
    #[test]
    fn a_closed_window_releases_a_waiting_reader() {
        let window = Window::new(1);
        for _ in 0..LINES_AHEAD_PER_WORKER {
            assert!(window.admit());
        }
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| window.admit());
            window.close();
            assert!(!reader.join().unwrap());
        });
        assert!(!window.admit());
    }
}
