//! TEMPORARY: the protocol crate's error types, until it lands on main.
#![allow(dead_code)]

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidCommand,
    InvalidArgument,
    Data,
    Io,
    ProcessSpawn,
    ScriptRead,
    Lua,
    Validation,
    ResourceLimit,
}

impl ErrorCode {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidCommand => "invalid_command",
            Self::InvalidArgument => "invalid_argument",
            Self::Data => "data",
            Self::Io => "io",
            Self::ProcessSpawn => "process_spawn",
            Self::ScriptRead => "script_read",
            Self::Lua => "lua",
            Self::Validation => "validation",
            Self::ResourceLimit => "resource_limit",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ErrorLabel {
    pub source: Option<String>,
    pub start: u32,
    pub end: u32,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShellError {
    pub code: ErrorCode,
    pub message: String,
    pub labels: Vec<ErrorLabel>,
    pub context: Vec<String>,
    pub help: Vec<String>,
    pub command: Option<String>,
    pub exit_status: Option<i32>,
}

impl ShellError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            labels: Vec::new(),
            context: Vec::new(),
            help: Vec::new(),
            command: None,
            exit_status: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    EmptyFrame,
    OversizedFrame,
    TruncatedHeader,
    TruncatedFrame,
    MalformedJson,
    UnknownVariant,
    BadVersion,
    DomainBounds,
    InconsistentResponse,
    IdentityMismatch,
    UnexpectedFrame,
    HostCallLimit,
    SessionPoisoned,
}

impl ErrorKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::EmptyFrame => "empty_frame",
            Self::OversizedFrame => "oversized_frame",
            Self::TruncatedHeader => "truncated_header",
            Self::TruncatedFrame => "truncated_frame",
            Self::MalformedJson => "malformed_json",
            Self::UnknownVariant => "unknown_variant",
            Self::BadVersion => "bad_version",
            Self::DomainBounds => "domain_bounds",
            Self::InconsistentResponse => "inconsistent_response",
            Self::IdentityMismatch => "identity_mismatch",
            Self::UnexpectedFrame => "unexpected_frame",
            Self::HostCallLimit => "host_call_limit",
            Self::SessionPoisoned => "session_poisoned",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError {
    kind: ErrorKind,
    message: String,
}

impl ProtocolError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
    pub const fn kind(&self) -> ErrorKind {
        self.kind
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Policy {
    allow_process: bool,
    memory_limit_bytes: u64,
    instruction_limit: u64,
    wall_time_ms: u64,
}

impl Policy {
    pub fn new(
        allow_process: bool,
        memory_limit_bytes: u64,
        instruction_limit: u64,
        wall_time_ms: u64,
    ) -> Result<Self, ProtocolError> {
        let ok = (1..=67_108_864).contains(&memory_limit_bytes)
            && (1..=100_000_000).contains(&instruction_limit)
            && (1..=60_000).contains(&wall_time_ms);
        if !ok {
            return Err(ProtocolError::new(
                ErrorKind::DomainBounds,
                "policy out of range",
            ));
        }
        Ok(Self {
            allow_process,
            memory_limit_bytes,
            instruction_limit,
            wall_time_ms,
        })
    }
    pub const fn allow_process(&self) -> bool {
        self.allow_process
    }
    pub const fn memory_limit_bytes(&self) -> u64 {
        self.memory_limit_bytes
    }
    pub const fn instruction_limit(&self) -> u64 {
        self.instruction_limit
    }
    pub const fn wall_time_ms(&self) -> u64 {
        self.wall_time_ms
    }
}

pub const LUA_WORKER_PROTOCOL_DESCRIPTOR: &str = "quirl.lua-worker@1{frame:u32be-length<=5242880+json;request:{deny_unknown,version=1,id:u64,operation};response:{deny_unknown,version=1,id:u64,ok:bool,result:any,error?:ShellError{labels.start/end:u32}};host-call:{deny_unknown,request_id:u64,call_id:u32,command<=1048576,deadline_ms:u64,max_output_bytes<=1048576};event.output.bytes:u64;context.capture.max_bytes_per_stream:u64;test-count:u64;policy:{memory_bytes:1..=67108864,instructions:1..=100000000,wall_time_ms:1..=60000};host-calls-per-request<=16;timeout|cancel|protocol-failure:kill-tree+reap+poison;stdio:stdin+stderr-protocol,stdout=null,terminal:none}";
