//! The `quirl-lua` command line: parse, run one supervised worker, print.
//!
//! Results go to stdout as JSON; errors go to stderr as a person would want
//! to read them (code, message, context, help), or to stdout as JSON records
//! with `--json`. Exit codes are in [`exit_code`] and README.md.

mod args;
mod batch;
mod check;
mod render;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use quirl_lua_protocol::decode_parent_frame;
use quirl_lua_protocol::records::{
    ContributionKind, ErrorCode, ExecutionContext, ExecutionEffects, ExecutionInput,
    ExecutionStatus, ExtensionEvent, Operation, OutputTarget, ParentFrame, Policy, PolicySettings,
    StructuredValue,
};
use quirl_lua_reference_parent::{
    Cancel, Error, ErrorClass, WORKER_COMMAND_ENV, Worker, WorkerCommand, WorkerConfig,
    WorkerLimits, containment_report,
};
use serde_json::Value;

use args::{Cli, Command, GlobalOptions, InputArgs, PluginArgs};

/// Exit status: success.
pub(crate) const EXIT_OK: u8 = 0;
/// Exit status: the Lua code failed (guest error).
pub(crate) const EXIT_GUEST: u8 = 1;
/// Exit status: usage error (bad arguments, unreadable file, invalid input).
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit status: a resource limit (instructions, memory, wall time, deadline, cancellation).
pub(crate) const EXIT_LIMIT: u8 = 3;
/// Exit status: worker failure or protocol violation.
pub(crate) const EXIT_WORKER: u8 = 4;
/// Exit status: unavailable or quarantined.
pub(crate) const EXIT_UNAVAILABLE: u8 = 5;

/// The exit status for an error.
pub(crate) fn exit_code(error: &Error) -> u8 {
    match error.class() {
        ErrorClass::Guest if error.code() == ErrorCode::ResourceLimit => EXIT_LIMIT,
        ErrorClass::Guest => EXIT_GUEST,
        ErrorClass::Limit => EXIT_LIMIT,
        ErrorClass::Deadline | ErrorClass::Cancelled => EXIT_LIMIT,
        ErrorClass::InvalidInput => EXIT_USAGE,
        ErrorClass::Unavailable | ErrorClass::Quarantined => EXIT_UNAVAILABLE,
        ErrorClass::Overloaded => EXIT_LIMIT,
        _ => EXIT_WORKER,
    }
}

/// Parse the command line and run it.
pub(crate) fn run() -> ExitCode {
    let arguments: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if let Some(text) = verbose_version(&arguments) {
        print!("{text}");
        return ExitCode::from(EXIT_OK);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return ExitCode::from(if error.use_stderr() {
                EXIT_USAGE
            } else {
                EXIT_OK
            });
        }
    };
    let json = cli.options.json;
    // DESIGN §16.7: descendants of host commands that leave their session and
    // lose their parent are reparented here, killed with their command in
    // process-group mode, and whatever is left is killed before exit.
    let _ = quirl_lua_reference_parent::process_host::adopt_orphans();
    let status = match execute(&cli) {
        Ok(Some(value)) => {
            render::print_result(&value, json);
            EXIT_OK
        }
        Ok(None) => EXIT_OK,
        Err(Failure::Worker(error)) => {
            let error = if json {
                // DESIGN §17.2: a JSON error says which containment was in effect.
                let report = containment_report(cli.options.containment);
                error
                    .with_containment_context(format!("containment: {}", report.summary()))
                    .with_containment_context(format!("landlock: {}", report.landlock.summary()))
            } else {
                error
            };
            render::print_error(&error, json);
            exit_code(&error)
        }
        Err(Failure::Usage(message)) => {
            render::print_usage_error(&message, json);
            EXIT_USAGE
        }
        Err(Failure::Status(value, status)) => {
            render::print_result(&value, json);
            status
        }
        Err(Failure::Silent(status)) => status,
    };
    quirl_lua_reference_parent::process_host::end_adopted_orphans();
    ExitCode::from(status)
}

/// `quirl-lua --version --verbose` (clap's own `--version` prints only the
/// version): the version and the containment in effect, which honours a
/// `--containment MODE` given with it. `None` for every other command line.
fn verbose_version(arguments: &[std::ffi::OsString]) -> Option<String> {
    let has = |flag: &str| arguments.iter().any(|argument| argument == flag);
    if !((has("--version") || has("-V")) && has("--verbose")) {
        return None;
    }
    let mut choice = quirl_lua_reference_parent::Containment::Auto;
    for (index, argument) in arguments.iter().enumerate() {
        let value = match argument.to_str() {
            Some("--containment") => arguments.get(index + 1).and_then(|value| value.to_str()),
            Some(other) => other.strip_prefix("--containment="),
            None => None,
        };
        if let Some(value) = value {
            match value.parse() {
                Ok(parsed) => choice = parsed,
                Err(message) => return Some(format!("error: {message}\n")),
            }
        }
    }
    let report = containment_report(choice);
    let mut text = format!(
        "quirl-lua {}\ncontainment: {}\n",
        env!("CARGO_PKG_VERSION"),
        report.mode
    );
    if let Some(path) = &report.cgroup {
        text.push_str(&format!("cgroup: {path}\n"));
        let controllers = if report.controllers.is_empty() {
            "none".to_owned()
        } else {
            report.controllers.join(", ")
        };
        text.push_str(&format!("controllers: {controllers}\n"));
    }
    for note in &report.notes {
        text.push_str(&format!("note: {note}\n"));
    }
    // DESIGN §16.6: the host commands' execute ruleset.
    text.push_str(&format!("landlock: {}\n", report.landlock.summary()));
    // DESIGN §16.6–§16.7: what a host command granted by name may do.
    text.push_str(&format!("exec guard: {}\n", report.exec_guard));
    text.push_str(&format!("command writes: {}\n", report.command_writes));
    text.push_str(&format!("pid namespace: {}\n", report.pid_namespace));
    text.push_str(&format!(
        "command pids limit: {}\n",
        report.command_pids_limit
    ));
    // DESIGN §18.3: the built-in worker's own lockdown.
    text.push_str(&format!("worker lockdown: {}\n", worker_lockdown()));
    Some(text)
}

/// What the built-in worker's lockdown does on this system after
/// `initialize` unless `--no-lockdown` (DESIGN §18.3).
pub(crate) fn worker_lockdown() -> String {
    quirl_lua_reference_worker::lockdown::summary()
}

/// Why a command did not produce a result.
pub(crate) enum Failure {
    /// The worker (or the guest) failed.
    Worker(Error),
    /// The command line or an input file was unusable.
    Usage(String),
    /// A result was produced but reports failure (e.g. `run` with a nonzero
    /// status): print it, exit with the status.
    Status(Value, u8),
    /// Everything was printed already; exit with this status.
    Silent(u8),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Self::Worker(error)
    }
}

fn execute(cli: &Cli) -> Result<Option<Value>, Failure> {
    let config = worker_config(&cli.options)?;
    match &cli.command {
        Command::Batch(options) => {
            batch::run(config, options)?;
            return Ok(None);
        }
        Command::Check { file } => {
            let config = config.with_grants(check::grants(&cli.options));
            check::run(config, file, cli.options.json)?;
            return Ok(None);
        }
        Command::Stats(options) => {
            let options = args::BatchArgs {
                stats: true,
                results: false,
                plugin: options.plugin.clone(),
                ..*options
            };
            batch::run(config, &options)?;
            return Ok(None);
        }
        _ => {}
    }
    execute_one(config, &cli.options, &cli.command).map(Some)
}

fn execute_one(
    config: WorkerConfig,
    options: &GlobalOptions,
    command: &Command,
) -> Result<Value, Failure> {
    let grants = options.grants.as_slice();
    match command {
        Command::Eval { source, modules } => {
            let preloads = preload_sources(&modules.modules, grants)?;
            let mut worker = Worker::spawn(config)?;
            for preload in &preloads {
                worker.eval(preload)?;
            }
            Ok(worker.eval(source)?)
        }
        Command::Test { file } => {
            let source = read_source(file)?;
            let count = Worker::spawn(config)?.test(&source, &file.display().to_string())?;
            Ok(Value::from(count))
        }
        Command::Config { file } => {
            let source = read_source(file)?;
            let config =
                Worker::spawn(config)?.load_config(&source, &file.display().to_string())?;
            to_json(&config)
        }
        Command::Run {
            file,
            input,
            modules,
            args,
        } => {
            let source = read_source(file)?;
            let context = with_output(execution_context(args, command_input(input)?)?, grants);
            let preloads = preload_sources(&modules.modules, grants)?;
            let mut worker = Worker::spawn(config)?;
            for preload in &preloads {
                worker.eval(preload)?;
            }
            let outcome = worker.run(&source, &file.display().to_string(), context)?;
            printed_outcome(&outcome, options.json)
        }
        Command::Plugin(plugin) => run_plugin(config, plugin, options),
        Command::Batch(_) | Command::Stats(_) | Command::Check { .. } => Err(Failure::Usage(
            "batch, stats and check run separately".to_owned(),
        )),
    }
}

/// The worker capability that keeps `load` and `require` (DESIGN §15.3).
const LUA_LOAD_GRANT: &str = quirl_lua_reference_worker::sandbox::LUA_LOAD_GRANT;

/// The `eval`s that preload `--module NAME=FILE` modules before the
/// script, one per module in the order given (each within the protocol's
/// source limit on its own): `package.preload[NAME]` becomes FILE compiled
/// in text mode as the chunk `@FILE`. A file that does not compile fails
/// its eval with Lua's message (`FILE:LINE: …`), before the script runs.
/// Empty without modules.
fn preload_sources(
    modules: &[(String, std::path::PathBuf)],
    grants: &[String],
) -> Result<Vec<String>, Failure> {
    if modules.is_empty() {
        return Ok(Vec::new());
    }
    if !grants.iter().any(|grant| grant == LUA_LOAD_GRANT) {
        return Err(Failure::Usage(format!(
            "--module needs --grant {LUA_LOAD_GRANT} (the worker's load and require)"
        )));
    }
    let mut names = std::collections::BTreeSet::new();
    let mut sources = Vec::with_capacity(modules.len());
    for (name, file) in modules {
        if !names.insert(name.as_str()) {
            return Err(Failure::Usage(format!(
                "--module {name} is given more than once"
            )));
        }
        let text = read_source(file)?;
        sources.push(format!(
            "local f, message = load({}, {}, 't')\n\
             if not f then error(message, 0) end\n\
             package.preload[{}] = f\n",
            lua_string_literal(&text),
            lua_string_literal(&format!("@{}", file.display())),
            lua_string_literal(name),
        ));
    }
    Ok(sources)
}

/// `text` as a Lua string literal that reads back byte for byte: `"`,
/// `\\`, line breaks and the other ASCII control characters escaped (the
/// controls as three-digit decimal escapes), everything else as it is.
pub(crate) fn lua_string_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_ascii_control() => out.push_str(&format!("\\{:03}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn run_plugin(
    config: WorkerConfig,
    plugin: &PluginArgs,
    options: &GlobalOptions,
) -> Result<Value, Failure> {
    let source = read_source(&plugin.file)?;
    let event = plugin.event.as_deref().map(parse_event).transpose()?;
    let input = command_input(&plugin.input)?;
    if plugin.command.is_none() && (!plugin.input.env.is_empty() || input != CommandInput::none()) {
        return Err(Failure::Usage(
            "--stdin, --input-json and --env apply only to --command".to_owned(),
        ));
    }
    let kind = plugin.kind.as_deref().map(parse_kind).transpose()?;
    let mut worker = Worker::spawn(config)?;
    let registrations = worker.load_plugin(&source, &plugin.file.display().to_string())?;
    if let Some(name) = &plugin.prompt {
        return Ok(worker
            .render_prompt(name, empty_context())?
            .map_or(Value::Null, Value::String));
    }
    if let Some(command) = &plugin.complete {
        return Ok(worker.complete(command, empty_context())?);
    }
    if let Some(name) = &plugin.command {
        let timeout = std::time::Duration::from_millis(worker.policy().wall_time_ms());
        let context = with_output(execution_context(&plugin.args, input)?, &options.grants);
        let outcome = worker.plugin_command(name, context, timeout)?;
        return printed_outcome(&outcome, options.json);
    }
    if let Some(name) = &plugin.contribution {
        let kind = match kind {
            Some(kind) => kind,
            None => contribution_kind(&registrations, name)?,
        };
        return Ok(worker.contribution(kind, name, empty_context())?);
    }
    if let Some(event) = event {
        let reports = worker.event(event)?;
        return to_json(&reports);
    }
    to_json(&registrations)
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Value, Failure> {
    serde_json::to_value(value)
        .map_err(|error| Failure::Usage(format!("cannot print the result: {error}")))
}

/// An `ExecutionOutcome` as JSON; a nonzero status is printed and becomes
/// the exit status ([`status_exit_code`]).
fn outcome_value(
    outcome: &quirl_lua_protocol::records::ExecutionOutcome,
) -> Result<Value, Failure> {
    let value = to_json(outcome)?;
    let ExecutionStatus::Exited(code) = outcome.status;
    match status_exit_code(code) {
        EXIT_OK => Ok(value),
        status => Err(Failure::Status(value, status)),
    }
}

/// The worker capability whose scripts write to their standard streams
/// (DESIGN §15.3 "The `lua.io` capability").
const LUA_IO_GRANT: &str = quirl_lua_reference_worker::sandbox::LUA_IO_GRANT;

/// `context` asking for captured output when the script has `io` and
/// `print` (`--grant lua.io`): what it writes is then its output, at most
/// the protocol's capture bound per stream.
fn with_output(mut context: ExecutionContext, grants: &[String]) -> ExecutionContext {
    if grants.iter().any(|grant| grant == LUA_IO_GRANT) {
        context.output = OutputTarget::Capture {
            max_bytes_per_stream: quirl_lua_protocol::limits::CAPTURE_BYTES_MAX,
        };
    }
    context
}

/// An `ExecutionOutcome` as the command's output: captured bytes (the
/// script's standard output and error) written as they are to this
/// process's, each diagnostic as a note on standard error, and the
/// script's status as the exit status; the outcome as JSON with `--json`
/// or for value output ([`outcome_value`]).
fn printed_outcome(
    outcome: &quirl_lua_protocol::records::ExecutionOutcome,
    json: bool,
) -> Result<Value, Failure> {
    use quirl_lua_protocol::records::ExecutionOutput;
    use std::io::Write as _;
    let ExecutionOutput::Bytes { stdout, stderr } = &outcome.output else {
        return outcome_value(outcome);
    };
    if json {
        return outcome_value(outcome);
    }
    let _ = std::io::stdout().write_all(stdout);
    let _ = std::io::stdout().flush();
    let mut errors = std::io::stderr();
    let _ = errors.write_all(stderr);
    for diagnostic in &outcome.diagnostics {
        let _ = writeln!(errors, "quirl-lua: {}", diagnostic.message);
    }
    let ExecutionStatus::Exited(code) = outcome.status;
    Err(Failure::Silent(status_exit_code(code)))
}

/// The exit status for a script's own status, as `quirl run` exits: 0..=255
/// as it is, above 255 as 255. A negative status (Quirl clamps it to 0)
/// exits 255 here, so that a failing status never reads as success
/// (DESIGN §17.5).
pub(crate) fn status_exit_code(status: i32) -> u8 {
    u8::try_from(status).unwrap_or(u8::MAX)
}

/// The kind under which the plugin registered the contribution `name`.
fn contribution_kind(
    registrations: &quirl_lua_protocol::records::PluginRegistrations,
    name: &str,
) -> Result<ContributionKind, Failure> {
    let mut kinds = registrations
        .contributions
        .iter()
        .filter(|contribution| contribution.name == name)
        .map(|contribution| contribution.kind);
    match (kinds.next(), kinds.next()) {
        (Some(kind), None) => Ok(kind),
        (None, _) => Err(Failure::Usage(format!(
            "the plugin registered no contribution `{name}`"
        ))),
        (Some(_), Some(_)) => Err(Failure::Usage(format!(
            "the plugin registered `{name}` for more than one kind: pass --kind"
        ))),
    }
}

/// Parse a contribution kind (`catalog`, `completion`, `panel`).
pub(crate) fn parse_kind(text: &str) -> Result<ContributionKind, Failure> {
    match text {
        "catalog" => Ok(ContributionKind::Catalog),
        "completion" => Ok(ContributionKind::Completion),
        "panel" => Ok(ContributionKind::Panel),
        other => Err(Failure::Usage(format!(
            "unknown contribution kind `{other}` (catalog, completion or panel)"
        ))),
    }
}

/// Input and environment for `run` and plugin commands.
#[derive(Debug, PartialEq)]
pub(crate) struct CommandInput {
    /// `ctx.input`.
    pub(crate) input: ExecutionInput,
    /// `ctx.env`.
    pub(crate) environment: BTreeMap<String, String>,
}

impl CommandInput {
    /// No input, no environment.
    pub(crate) fn none() -> Self {
        Self {
            input: ExecutionInput::None,
            environment: BTreeMap::new(),
        }
    }
}

/// Most bytes `--stdin` reads: the protocol's bound on execution input.
const STDIN_BYTES_MAX: usize = quirl_lua_protocol::limits::EXECUTION_BYTES_MAX;

fn command_input(options: &InputArgs) -> Result<CommandInput, Failure> {
    let input = if options.stdin {
        ExecutionInput::Bytes(read_stdin(STDIN_BYTES_MAX)?)
    } else if let Some(text) = &options.input_json {
        let value: Value = serde_json::from_str(text)
            .map_err(|error| Failure::Usage(format!("--input-json is not JSON: {error}")))?;
        ExecutionInput::Value(structured_value(value))
    } else {
        ExecutionInput::None
    };
    let mut environment = BTreeMap::new();
    for (name, value) in &options.env {
        environment.insert(name.clone(), value.clone());
    }
    Ok(CommandInput { input, environment })
}

/// Standard input to its end, refusing more than `limit` bytes.
fn read_stdin(limit: usize) -> Result<Vec<u8>, Failure> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|error| Failure::Usage(format!("cannot read stdin: {error}")))?;
    if bytes.len() > limit {
        return Err(Failure::Usage(format!(
            "standard input is larger than the {limit} bytes an execution input may hold"
        )));
    }
    Ok(bytes)
}

/// A JSON value as a structured value, as Quirl reads JSON: integers as
/// `int` (or `u_int` above `i64::MAX`), other numbers as `decimal` text,
/// arrays as `list`, objects as `record` (serde_json nests at most 128
/// levels, which bounds the recursion).
pub(crate) fn structured_value(value: Value) -> StructuredValue {
    match value {
        Value::Null => StructuredValue::Nothing,
        Value::Bool(value) => StructuredValue::Bool(value),
        Value::Number(number) => match (number.as_i64(), number.as_u64()) {
            (Some(value), _) => StructuredValue::Int(value),
            (_, Some(value)) => StructuredValue::UInt(value),
            _ => StructuredValue::Decimal(number.to_string()),
        },
        Value::String(value) => StructuredValue::String(value),
        Value::Array(items) => {
            StructuredValue::List(items.into_iter().map(structured_value).collect())
        }
        Value::Object(members) => StructuredValue::Record(
            members
                .into_iter()
                .map(|(key, value)| (key, structured_value(value)))
                .collect(),
        ),
    }
}

/// `{}`: the context handed to prompt and completion callbacks from the CLI.
pub(crate) fn empty_context() -> Value {
    Value::Object(serde_json::Map::new())
}

/// The context of `run` and plugin commands: arguments, the given input and
/// environment (nothing of this process's own environment), the current
/// directory, typed value output (the runner ABI v1 form).
pub(crate) fn execution_context(
    args: &[String],
    input: CommandInput,
) -> Result<ExecutionContext, Failure> {
    let cwd = std::env::current_dir()
        .map_err(|error| Failure::Usage(format!("cannot read the working directory: {error}")))?;
    let context = ExecutionContext {
        arguments: args.to_vec(),
        environment: input.environment,
        working_directory: cwd.to_string_lossy().into_owned(),
        input: input.input,
        output: OutputTarget::Value,
        declared_effects: ExecutionEffects::default(),
    };
    context
        .validate()
        .map_err(|error| Failure::Usage(format!("invalid execution context: {error}")))?;
    Ok(context)
}

/// Decode an extension event given as JSON, as strictly as the worker will.
pub(crate) fn parse_event(text: &str) -> Result<ExtensionEvent, Failure> {
    let value: Value = serde_json::from_str(text)
        .map_err(|error| Failure::Usage(format!("--event is not JSON: {error}")))?;
    event_from_value(&value).map_err(Failure::Usage)
}

/// Decode an extension event from a JSON value (strict, via the envelope decoder).
pub(crate) fn event_from_value(value: &Value) -> Result<ExtensionEvent, String> {
    let envelope = serde_json::json!({
        "kind": "request",
        "request": {"version": 1, "id": 1, "operation": {"operation": "event", "event": value}},
    });
    let payload = serde_json::to_vec(&envelope).map_err(|error| error.to_string())?;
    match decode_parent_frame(&payload) {
        Ok(ParentFrame::Request { request }) => match request.operation {
            Operation::Event { event } => Ok(event),
            _ => Err("not an event".to_owned()),
        },
        Ok(ParentFrame::HostResponse { .. }) => Err("not an event".to_owned()),
        Err(error) => Err(format!("invalid extension event: {error}")),
    }
}

/// A source file's text. A file that is not UTF-8 is refused before
/// anything starts (a source travels as a JSON string, DESIGN §15.3), naming
/// the first invalid byte ([`not_utf8`]).
pub(crate) fn read_source(path: &Path) -> Result<String, Failure> {
    let bytes = std::fs::read(path)
        .map_err(|error| Failure::Usage(format!("cannot read `{}`: {error}", path.display())))?;
    String::from_utf8(bytes).map_err(|error| {
        Failure::Usage(not_utf8(
            &path.display().to_string(),
            error.as_bytes(),
            error.utf8_error().valid_up_to(),
        ))
    })
}

/// Why `bytes` (the file `name`) is no source: the offset, line and value
/// of its first byte that is not part of valid UTF-8 (at `at`), and how to
/// write that byte in Lua instead.
pub(crate) fn not_utf8(name: &str, bytes: &[u8], at: usize) -> String {
    let line = 1 + bytes[..at.min(bytes.len())]
        .iter()
        .filter(|&&byte| byte == b'\n')
        .count();
    match bytes.get(at) {
        Some(byte) => format!(
            "`{name}` is not UTF-8: byte offset {at} (line {line}) holds 0x{byte:02X}, which starts no valid UTF-8 character; \
             Lua sources are text: write such a byte as the escape \\x{byte:02X} in a string literal"
        ),
        None => format!("`{name}` is not UTF-8 at byte offset {at} (line {line})"),
    }
}

fn worker_config(options: &GlobalOptions) -> Result<WorkerConfig, Failure> {
    let policy = Policy::new(PolicySettings {
        allow_process: options.allow_process,
        memory_limit_bytes: options.memory,
        instruction_limit: options.instructions,
        wall_time_ms: options.wall_time_ms,
    })
    .map_err(|error| Failure::Usage(format!("invalid policy: {error}")))?;
    let mut command = worker_command(options)?;
    if options.no_lockdown {
        command = command.arg(quirl_lua_reference_worker::lockdown::NO_LOCKDOWN_ARGUMENT);
    }
    let mut config = WorkerConfig::new(command, policy)
        .with_cancel(cancel_on_interrupt())
        .with_limits(worker_limits(options, &policy))
        .with_containment(options.containment)
        .with_command_pids_max(options.command_pids_max.0)
        .with_require_landlock(options.require_landlock);
    // DESIGN §16.6: fail closed before anything starts.
    let landlock = quirl_lua_reference_parent::process_host::landlock_support();
    if options.require_landlock && !landlock.available() {
        return Err(Failure::Usage(format!(
            "--require-landlock: Landlock is unavailable here ({})",
            landlock.summary()
        )));
    }
    if !options.grants.is_empty() {
        config = config.with_grants(options.grants.clone());
    }
    Ok(config)
}

/// The worker's resource limits (DESIGN §18.1): none with `--no-lockdown`;
/// all of them for the built-in worker; for a worker command given with
/// `--worker` or `QUIRL_LUA_WORKER`, a program this CLI knows nothing
/// about, only those every worker can live with (address space, core, open
/// files) — not the file-size and process limits, which break a worker that
/// writes a file or starts a helper (the conformance suite's scripted
/// workers record what they see in a file). Library users choose with
/// `WorkerConfig::with_limits`.
fn worker_limits(options: &GlobalOptions, policy: &Policy) -> WorkerLimits {
    if options.no_lockdown {
        return WorkerLimits::unlimited();
    }
    let limits = WorkerLimits::for_policy(policy);
    let custom = options.worker.is_some()
        || std::env::var_os(WORKER_COMMAND_ENV).is_some_and(|line| !line.is_empty());
    if custom {
        limits.file_size(None).processes(None)
    } else {
        limits
    }
}

/// A token that `SIGINT`, `SIGTERM` or `SIGHUP` cancel.
///
/// The signals are blocked in every thread (workers get a clean mask from
/// the spawn) and a small thread waits for them with `sigwait`: the first
/// cancels the request in flight, so the worker is killed and reaped and
/// `quirl-lua` exits 3; a second one exits at once with 128 + signal.
fn cancel_on_interrupt() -> Cancel {
    let token = Cancel::new();
    // SAFETY: sigset_t is plain data; the calls initialise and fill a set we
    // own and block those signals in this (the only) thread, before any other
    // thread exists, so every later thread inherits the mask. Raw `libc`:
    // rustix exposes signal masks and `sigwait` only as `unsafe` functions
    // of its `runtime` module, and std has none.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&raw mut set, signal);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut()) != 0 {
            return token;
        }
        set
    };
    let canceller = token.clone();
    let _ = std::thread::Builder::new()
        .name("quirl-lua-signals".to_owned())
        .spawn(move || {
            let wait = || {
                let mut signal: libc::c_int = 0;
                // SAFETY: waits for one of the blocked signals of `set`, a
                // set this closure owns, and writes its number into `signal`.
                let waited = unsafe { libc::sigwait(&raw const set, &raw mut signal) };
                (waited == 0).then_some(signal)
            };
            if wait().is_some() {
                canceller.cancel();
            }
            if let Some(signal) = wait() {
                std::process::exit(128 + signal);
            }
        });
    token
}

fn worker_command(options: &GlobalOptions) -> Result<WorkerCommand, Failure> {
    if let Some(line) = &options.worker {
        return WorkerCommand::parse(line)
            .map_err(|error| Failure::Usage(format!("--worker: {error}")));
    }
    if let Some(line) = std::env::var_os(WORKER_COMMAND_ENV).filter(|line| !line.is_empty()) {
        let line = line
            .into_string()
            .map_err(|_| Failure::Usage(format!("{WORKER_COMMAND_ENV} is not valid UTF-8")))?;
        return WorkerCommand::parse(&line)
            .map_err(|error| Failure::Usage(format!("{WORKER_COMMAND_ENV}: {error}")));
    }
    WorkerCommand::current_exe().map_err(|error| {
        Failure::Usage(format!(
            "cannot locate this executable for worker mode: {error}"
        ))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn first_invalid(bytes: &[u8]) -> usize {
        std::str::from_utf8(bytes).unwrap_err().valid_up_to()
    }

    #[test]
    fn a_source_that_is_not_utf8_is_named_by_its_first_invalid_byte() {
        let bytes = b"-- caf\xc3\xa9\nlocal s = '\xff\xfe'\n";
        let at = first_invalid(bytes);
        assert_eq!(at, 20);
        assert_eq!(
            not_utf8("x.lua", bytes, at),
            "`x.lua` is not UTF-8: byte offset 20 (line 2) holds 0xFF, which starts no valid \
             UTF-8 character; Lua sources are text: write such a byte as the escape \\xFF in a \
             string literal"
        );
        // A sequence cut short by the end of the file.
        let bytes = b"return '\xe2\x82";
        let at = first_invalid(bytes);
        assert!(not_utf8("y.lua", bytes, at).contains("byte offset 8 (line 1) holds 0xE2"));
    }

    #[test]
    fn lua_string_literals_read_back_byte_for_byte() {
        assert_eq!(
            lua_string_literal("a\"b\\c\r\nd\u{7f}é\0\t1"),
            "\"a\\\"b\\\\c\\r\\nd\\127é\\000\\0091\""
        );
    }
}
