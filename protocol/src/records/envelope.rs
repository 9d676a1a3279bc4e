//! The envelope: frames, requests, operations, responses, host calls.

use super::{
    CommandOutcome, ContributionKind, ExecutionContext, ExtensionEvent, Policy, ShellError,
};
use crate::error::{ErrorKind, ProtocolError};
use crate::json::{Decode, Parser, Validate, decode_present, decode_tagged};
use crate::limits::{
    HOST_CALLS_PER_REQUEST_MAX, HOST_COMMAND_BYTES_MAX, HOST_OUTPUT_BYTES_MAX,
    LUA_WORKER_PROTOCOL_DESCRIPTOR, PROTOCOL_VERSION, SOURCE_BYTES_MAX,
};
use crate::value::CanonicalValue;
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use serde_json::Value;

/// A frame the parent sends to the worker.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ParentFrame {
    /// `{"kind":"request","request":{…}}`
    Request {
        /// The request.
        request: Request,
    },
    /// `{"kind":"host_response","response":{…}}`
    HostResponse {
        /// The answer to the worker's pending host call.
        response: HostResponse,
    },
}

decode_tagged!(ParentFrame "parent frame", tag = "kind" {
    "request" => Request { request: req },
    "host_response" => HostResponse { response: req },
});
impl Validate for ParentFrame {}

/// A frame the worker sends to the parent.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WorkerFrame {
    /// `{"kind":"response","response":{…}}`
    Response {
        /// The response to the request in flight.
        response: Response,
    },
    /// `{"kind":"host_call","call":{…}}`
    HostCall {
        /// A process run the worker asks the parent to perform.
        call: HostCall,
    },
}

decode_tagged!(WorkerFrame "worker frame", tag = "kind" {
    "response" => Response { response: req },
    "host_call" => HostCall { call: req },
});
impl Validate for WorkerFrame {}

fn check_version(parser: &mut Parser<'_>) -> Result<(), ProtocolError> {
    let version = u32::decode(parser)?;
    if version == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(ProtocolError::new(
            ErrorKind::BadVersion,
            format!("protocol version {version} is not supported; only {PROTOCOL_VERSION} is"),
        ))
    }
}

/// A request: `{"version":1,"id":N,"operation":{…}}`.
///
/// The version is always [`PROTOCOL_VERSION`]; the decoder rejects any
/// other (`bad_version`), so it is not stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Request id; strictly increasing within a session.
    pub id: u64,
    /// What to do.
    pub operation: Operation,
}

impl Serialize for Request {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_struct("Request", 3)?;
        out.serialize_field("version", &PROTOCOL_VERSION)?;
        out.serialize_field("id", &self.id)?;
        out.serialize_field("operation", &self.operation)?;
        out.end()
    }
}

impl Decode for Request {
    fn decode(parser: &mut Parser<'_>) -> Result<Self, ProtocolError> {
        const RECORD: &str = "request";
        parser.begin_object(RECORD)?;
        let (mut version, mut id, mut operation) = (false, None, None);
        let mut first = true;
        while let Some(key) = parser.next_key(&mut first)? {
            match key.as_ref() {
                "version" if !version => {
                    check_version(parser).map_err(|e| e.at("version"))?;
                    version = true;
                }
                "id" if id.is_none() => id = Some(u64::decode(parser).map_err(|e| e.at("id"))?),
                "operation" if operation.is_none() => {
                    operation = Some(Operation::decode(parser).map_err(|e| e.at("operation"))?);
                }
                "version" | "id" | "operation" => return Err(ProtocolError::duplicate_key(&key)),
                _ => return Err(ProtocolError::unknown_field(&key, RECORD)),
            }
        }
        if !version {
            return Err(ProtocolError::missing_field("version", RECORD));
        }
        Ok(Request {
            id: id.ok_or_else(|| ProtocolError::missing_field("id", RECORD))?,
            operation: operation
                .ok_or_else(|| ProtocolError::missing_field("operation", RECORD))?,
        })
    }
}

/// The twelve operations of v1, tagged by `operation`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
#[serde(tag = "operation", rename_all = "snake_case")]
pub enum Operation {
    /// First request of every session; builds the VM.
    Initialize {
        /// Must equal [`LUA_WORKER_PROTOCOL_DESCRIPTOR`] exactly.
        protocol_descriptor: String,
        /// Resource policy.
        policy: Policy,
        /// Capability grants (`null` for the policy defaults).
        grants: Option<Vec<String>>,
        /// Whether `quirl.process.run` may send host calls.
        process_enabled: bool,
    },
    /// Evaluate a chunk; the result is its free-form return value.
    Eval {
        /// Lua source (at most [`SOURCE_BYTES_MAX`] bytes).
        source: String,
    },
    /// Statically check a source; result `null`.
    Check {
        /// Lua source.
        source: String,
        /// Name used in diagnostics.
        source_name: String,
    },
    /// Evaluate a configuration; result a [`QuirlConfig`](super::QuirlConfig).
    LoadConfig {
        /// Lua source.
        source: String,
        /// Name used in diagnostics.
        source_name: String,
    },
    /// Load a plugin; result [`PluginRegistrations`](super::PluginRegistrations).
    LoadPlugin {
        /// Lua source.
        source: String,
        /// Name used in diagnostics.
        source_name: String,
    },
    /// Render a prompt segment; result a string or `null`.
    RenderPrompt {
        /// Segment name.
        name: String,
        /// Free-form context.
        #[serde(serialize_with = "crate::value::serialize_canonical")]
        context: Value,
    },
    /// Ask a completion provider; free-form result.
    Complete {
        /// Command path.
        command: String,
        /// Free-form context.
        #[serde(serialize_with = "crate::value::serialize_canonical")]
        context: Value,
    },
    /// Invoke a contribution; free-form result.
    Contribution {
        /// Surface.
        kind: ContributionKind,
        /// Contribution name.
        name: String,
        /// Free-form context.
        #[serde(serialize_with = "crate::value::serialize_canonical")]
        context: Value,
    },
    /// Run a runner module; result an [`ExecutionOutcome`](super::ExecutionOutcome).
    Run {
        /// Lua source.
        source: String,
        /// Name used in diagnostics.
        source_name: String,
        /// Execution context.
        context: ExecutionContext,
    },
    /// Run a plugin command; result an [`ExecutionOutcome`](super::ExecutionOutcome).
    PluginCommand {
        /// Command name.
        name: String,
        /// Execution context.
        context: ExecutionContext,
        /// Remaining deadline in ms (at least 1).
        deadline_ms: u64,
    },
    /// Dispatch an extension event; result a list of [`EventHandlerReport`](super::EventHandlerReport).
    Event {
        /// The event.
        event: ExtensionEvent,
    },
    /// Run a test file; result the number of tests (u64).
    Test {
        /// Lua source.
        source: String,
        /// Name used in diagnostics.
        source_name: String,
    },
}

decode_tagged!(Operation "operation", tag = "operation" {
    "initialize" => Initialize { protocol_descriptor: req, policy: req, grants: req, process_enabled: req },
    "eval" => Eval { source: req },
    "check" => Check { source: req, source_name: req },
    "load_config" => LoadConfig { source: req, source_name: req },
    "load_plugin" => LoadPlugin { source: req, source_name: req },
    "render_prompt" => RenderPrompt { name: req, context: req },
    "complete" => Complete { command: req, context: req },
    "contribution" => Contribution { kind: req, name: req, context: req },
    "run" => Run { source: req, source_name: req, context: req },
    "plugin_command" => PluginCommand { name: req, context: req, deadline_ms: req },
    "event" => Event { event: req },
    "test" => Test { source: req, source_name: req },
});

impl Validate for Operation {
    fn validate(&self) -> Result<(), ProtocolError> {
        match self {
            Operation::Initialize {
                protocol_descriptor,
                ..
            } => {
                if protocol_descriptor != LUA_WORKER_PROTOCOL_DESCRIPTOR {
                    return Err(ProtocolError::new(
                        ErrorKind::DescriptorMismatch,
                        "initialize carries a protocol descriptor other than quirl.lua-worker@1's",
                    )
                    .at("protocol_descriptor"));
                }
                Ok(())
            }
            Operation::Eval { source }
            | Operation::Check { source, .. }
            | Operation::LoadConfig { source, .. }
            | Operation::LoadPlugin { source, .. }
            | Operation::Run { source, .. }
            | Operation::Test { source, .. } => {
                if source.len() > SOURCE_BYTES_MAX {
                    return Err(ProtocolError::domain(format!(
                        "source has {} bytes; at most {SOURCE_BYTES_MAX} are allowed",
                        source.len()
                    ))
                    .at("source"));
                }
                Ok(())
            }
            Operation::PluginCommand { deadline_ms: 0, .. } => Err(ProtocolError::domain(
                "plugin command deadline_ms must be at least 1",
            )
            .at("deadline_ms")),
            Operation::RenderPrompt { .. }
            | Operation::Complete { .. }
            | Operation::Contribution { .. }
            | Operation::PluginCommand { .. }
            | Operation::Event { .. } => Ok(()),
        }
    }
}

impl Operation {
    /// An `initialize` operation carrying the v1 descriptor.
    pub fn initialize(policy: Policy, grants: Option<Vec<String>>, process_enabled: bool) -> Self {
        Operation::Initialize {
            protocol_descriptor: LUA_WORKER_PROTOCOL_DESCRIPTOR.to_owned(),
            policy,
            grants,
            process_enabled,
        }
    }

    /// Which operation this is.
    pub const fn kind(&self) -> OperationKind {
        match self {
            Operation::Initialize { .. } => OperationKind::Initialize,
            Operation::Eval { .. } => OperationKind::Eval,
            Operation::Check { .. } => OperationKind::Check,
            Operation::LoadConfig { .. } => OperationKind::LoadConfig,
            Operation::LoadPlugin { .. } => OperationKind::LoadPlugin,
            Operation::RenderPrompt { .. } => OperationKind::RenderPrompt,
            Operation::Complete { .. } => OperationKind::Complete,
            Operation::Contribution { .. } => OperationKind::Contribution,
            Operation::Run { .. } => OperationKind::Run,
            Operation::PluginCommand { .. } => OperationKind::PluginCommand,
            Operation::Event { .. } => OperationKind::Event,
            Operation::Test { .. } => OperationKind::Test,
        }
    }
}

/// The name of an operation, without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationKind {
    /// `initialize`
    Initialize,
    /// `eval`
    Eval,
    /// `check`
    Check,
    /// `load_config`
    LoadConfig,
    /// `load_plugin`
    LoadPlugin,
    /// `render_prompt`
    RenderPrompt,
    /// `complete`
    Complete,
    /// `contribution`
    Contribution,
    /// `run`
    Run,
    /// `plugin_command`
    PluginCommand,
    /// `event`
    Event,
    /// `test`
    Test,
}

impl OperationKind {
    /// All twelve, in wire declaration order.
    pub const ALL: [OperationKind; 12] = [
        OperationKind::Initialize,
        OperationKind::Eval,
        OperationKind::Check,
        OperationKind::LoadConfig,
        OperationKind::LoadPlugin,
        OperationKind::RenderPrompt,
        OperationKind::Complete,
        OperationKind::Contribution,
        OperationKind::Run,
        OperationKind::PluginCommand,
        OperationKind::Event,
        OperationKind::Test,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            OperationKind::Initialize => "initialize",
            OperationKind::Eval => "eval",
            OperationKind::Check => "check",
            OperationKind::LoadConfig => "load_config",
            OperationKind::LoadPlugin => "load_plugin",
            OperationKind::RenderPrompt => "render_prompt",
            OperationKind::Complete => "complete",
            OperationKind::Contribution => "contribution",
            OperationKind::Run => "run",
            OperationKind::PluginCommand => "plugin_command",
            OperationKind::Event => "event",
            OperationKind::Test => "test",
        }
    }
}

/// A response: `{"version":1,"id":N,"ok":true,"result":…}` or
/// `{"version":1,"id":N,"ok":false,"result":null,"error":{…}}`.
///
/// `ok`, `result` and `error` are one `Result`, so they cannot disagree;
/// the decoder rejects wire forms where they do (`inconsistent_response`).
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// Id of the request answered.
    pub id: u64,
    /// The free-form result, or the error record.
    pub result: Result<Value, ShellError>,
}

impl Response {
    /// A successful response.
    pub fn success(id: u64, result: Value) -> Self {
        Self {
            id,
            result: Ok(result),
        }
    }

    /// A failed response.
    pub fn failure(id: u64, error: ShellError) -> Self {
        Self {
            id,
            result: Err(error),
        }
    }
}

impl Serialize for Response {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = if self.result.is_ok() { 4 } else { 5 };
        let mut out = serializer.serialize_struct("Response", fields)?;
        out.serialize_field("version", &PROTOCOL_VERSION)?;
        out.serialize_field("id", &self.id)?;
        match &self.result {
            Ok(value) => {
                out.serialize_field("ok", &true)?;
                out.serialize_field("result", &CanonicalValue(value))?;
            }
            Err(error) => {
                out.serialize_field("ok", &false)?;
                out.serialize_field("result", &Value::Null)?;
                out.serialize_field("error", error)?;
            }
        }
        out.end()
    }
}

impl Decode for Response {
    fn decode(parser: &mut Parser<'_>) -> Result<Self, ProtocolError> {
        const RECORD: &str = "response";
        parser.begin_object(RECORD)?;
        let mut version = false;
        let (mut id, mut ok, mut result, mut error) = (None, None, None, None);
        let mut first = true;
        while let Some(key) = parser.next_key(&mut first)? {
            match key.as_ref() {
                "version" if !version => {
                    check_version(parser).map_err(|e| e.at("version"))?;
                    version = true;
                }
                "id" if id.is_none() => id = Some(u64::decode(parser).map_err(|e| e.at("id"))?),
                "ok" if ok.is_none() => ok = Some(parser.parse_bool().map_err(|e| e.at("ok"))?),
                "result" if result.is_none() => {
                    result = Some(parser.parse_value().map_err(|e| e.at("result"))?);
                }
                "error" if error.is_none() => {
                    error = decode_present::<ShellError>(parser).map_err(|e| e.at("error"))?;
                }
                "version" | "id" | "ok" | "result" | "error" => {
                    return Err(ProtocolError::duplicate_key(&key));
                }
                _ => return Err(ProtocolError::unknown_field(&key, RECORD)),
            }
        }
        if !version {
            return Err(ProtocolError::missing_field("version", RECORD));
        }
        let id = id.ok_or_else(|| ProtocolError::missing_field("id", RECORD))?;
        let ok = ok.ok_or_else(|| ProtocolError::missing_field("ok", RECORD))?;
        let result = result.ok_or_else(|| ProtocolError::missing_field("result", RECORD))?;
        let inconsistent = |message: &str| {
            Err(ProtocolError::new(
                ErrorKind::InconsistentResponse,
                message.to_owned(),
            ))
        };
        match (ok, error) {
            (true, None) => Ok(Response::success(id, result)),
            (true, Some(_)) => inconsistent("a response with ok:true carries an error"),
            (false, None) => inconsistent("a response with ok:false lacks its error"),
            (false, Some(_)) if !result.is_null() => {
                inconsistent("a response with ok:false carries a non-null result")
            }
            (false, Some(error)) => Ok(Response::failure(id, error)),
        }
    }
}

/// A process run the worker asks the parent to perform.
///
/// Bounds: `call_id` in `1..=`[`HOST_CALLS_PER_REQUEST_MAX`] (above:
/// `host_call_limit`), `command` at most [`HOST_COMMAND_BYTES_MAX`] bytes,
/// `max_output_bytes` at most [`HOST_OUTPUT_BYTES_MAX`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct HostCall {
    /// Id of the request in flight.
    pub request_id: u64,
    /// 1 for the first call of the request, then 2, 3, …
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = HOST_CALLS_PER_REQUEST_MAX)))]
    pub call_id: u32,
    /// The command source.
    pub command: String,
    /// Deadline of the call in ms.
    pub deadline_ms: u64,
    /// Per-stream capture ceiling.
    #[cfg_attr(feature = "schema", schemars(range(max = HOST_OUTPUT_BYTES_MAX)))]
    pub max_output_bytes: u64,
}

crate::json::decode_record!(HostCall "host call" {
    request_id: req,
    call_id: req,
    command: req,
    deadline_ms: req,
    max_output_bytes: req,
});

pub(crate) fn check_call_id(call_id: u32) -> Result<(), ProtocolError> {
    if call_id == 0 {
        return Err(ProtocolError::domain("call ids start at 1").at("call_id"));
    }
    if call_id > HOST_CALLS_PER_REQUEST_MAX {
        return Err(ProtocolError::new(
            ErrorKind::HostCallLimit,
            format!("call id {call_id} exceeds the limit of {HOST_CALLS_PER_REQUEST_MAX} host calls per request"),
        )
        .at("call_id"));
    }
    Ok(())
}

impl Validate for HostCall {
    fn validate(&self) -> Result<(), ProtocolError> {
        check_call_id(self.call_id)?;
        if self.command.len() > HOST_COMMAND_BYTES_MAX {
            return Err(ProtocolError::domain(format!(
                "host-call command has {} bytes; at most {HOST_COMMAND_BYTES_MAX} are allowed",
                self.command.len()
            ))
            .at("command"));
        }
        if self.max_output_bytes > HOST_OUTPUT_BYTES_MAX {
            return Err(ProtocolError::domain(format!(
                "host-call max_output_bytes is {}; at most {HOST_OUTPUT_BYTES_MAX} is allowed",
                self.max_output_bytes
            ))
            .at("max_output_bytes"));
        }
        Ok(())
    }
}

/// The parent's answer to a host call: exactly one of `outcome` and `error`.
///
/// Wire: `{"request_id":N,"call_id":M,"outcome":{…}}` or `{…,"error":{…}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostResponse {
    /// Echo of the call's request id.
    pub request_id: u64,
    /// Echo of the call id.
    pub call_id: u32,
    /// The process outcome, or why it could not be produced.
    pub result: Result<CommandOutcome, ShellError>,
}

impl Serialize for HostResponse {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_struct("HostResponse", 3)?;
        out.serialize_field("request_id", &self.request_id)?;
        out.serialize_field("call_id", &self.call_id)?;
        match &self.result {
            Ok(outcome) => out.serialize_field("outcome", outcome)?,
            Err(error) => out.serialize_field("error", error)?,
        }
        out.end()
    }
}

impl Decode for HostResponse {
    fn decode(parser: &mut Parser<'_>) -> Result<Self, ProtocolError> {
        const RECORD: &str = "host response";
        parser.begin_object(RECORD)?;
        let (mut request_id, mut call_id, mut outcome, mut error) = (None, None, None, None);
        let mut first = true;
        while let Some(key) = parser.next_key(&mut first)? {
            match key.as_ref() {
                "request_id" if request_id.is_none() => {
                    request_id = Some(u64::decode(parser).map_err(|e| e.at("request_id"))?);
                }
                "call_id" if call_id.is_none() => {
                    call_id = Some(u32::decode(parser).map_err(|e| e.at("call_id"))?);
                }
                "outcome" if outcome.is_none() => {
                    outcome =
                        decode_present::<CommandOutcome>(parser).map_err(|e| e.at("outcome"))?;
                }
                "error" if error.is_none() => {
                    error = decode_present::<ShellError>(parser).map_err(|e| e.at("error"))?;
                }
                "request_id" | "call_id" | "outcome" | "error" => {
                    return Err(ProtocolError::duplicate_key(&key));
                }
                _ => return Err(ProtocolError::unknown_field(&key, RECORD)),
            }
        }
        let request_id =
            request_id.ok_or_else(|| ProtocolError::missing_field("request_id", RECORD))?;
        let call_id = call_id.ok_or_else(|| ProtocolError::missing_field("call_id", RECORD))?;
        check_call_id(call_id)?;
        let result = match (outcome, error) {
            (Some(outcome), None) => Ok(outcome),
            (None, Some(error)) => Err(error),
            (Some(_), Some(_)) => {
                return Err(ProtocolError::new(
                    ErrorKind::InconsistentHostResponse,
                    "a host response carries both an outcome and an error",
                ));
            }
            (None, None) => {
                return Err(ProtocolError::new(
                    ErrorKind::InconsistentHostResponse,
                    "a host response carries neither an outcome nor an error",
                ));
            }
        };
        Ok(HostResponse {
            request_id,
            call_id,
            result,
        })
    }
}
