//! The stable error type of the protocol crate.
//!
//! Every failure carries an [`ErrorKind`]: a precise, stable sub-kind that
//! tests, fixtures and conformance reports name (`unknown_field`,
//! `oversized_frame`, …). Each kind maps to one v1 wire [`ErrorCode`], the
//! code a peer would put into an error record. Messages and context are for
//! people; branch on the kind.

mod context;

pub use context::ErrorContext;

use crate::records::ErrorCode;
use std::fmt;
use std::sync::Arc;

macro_rules! error_kinds {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal => $code:ident, )*) => {
        /// Precise, stable reason of a [`ProtocolError`].
        ///
        /// The snake_case name ([`ErrorKind::as_str`]) is part of the
        /// contract: fixture manifests and conformance reports use it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorKind {
            $( $(#[$doc])* $variant, )*
        }

        impl ErrorKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$variant),*];

            /// The stable snake_case name of this kind.
            pub const fn as_str(self) -> &'static str {
                match self { $( ErrorKind::$variant => $name, )* }
            }

            /// The v1 wire error code this kind is reported as.
            pub const fn code(self) -> ErrorCode {
                match self { $( ErrorKind::$variant => ErrorCode::$code, )* }
            }

            /// Parse a stable snake_case name.
            pub fn from_name(name: &str) -> Option<Self> {
                match name { $( $name => Some(ErrorKind::$variant), )* _ => None }
            }
        }
    };
}

error_kinds! {
    /// A frame header declared a length of zero.
    EmptyFrame = "empty_frame" => Validation,
    /// A frame header declared more than the maximum payload, or an encoded frame would exceed it.
    OversizedFrame = "oversized_frame" => ResourceLimit,
    /// The stream ended inside a 4-byte frame header.
    TruncatedHeader = "truncated_header" => Io,
    /// The stream ended inside a frame payload.
    TruncatedFrame = "truncated_frame" => Io,
    /// The payload is not valid UTF-8, or a `\u` escape denotes a lone surrogate.
    InvalidUtf8 = "invalid_utf8" => Validation,
    /// The payload starts with a UTF-8 byte order mark.
    ByteOrderMark = "byte_order_mark" => Validation,
    /// The payload is not one JSON value (syntax error, leading whitespace, raw control character, non-finite number, …).
    MalformedJson = "malformed_json" => Validation,
    /// Bytes (whitespace included) follow the JSON value.
    TrailingBytes = "trailing_bytes" => Validation,
    /// An object repeats a key, at any level, free-form values and tags included.
    DuplicateKey = "duplicate_key" => Validation,
    /// Arrays and objects nest deeper than the JSON depth limit.
    DepthExceeded = "depth_exceeded" => Validation,
    /// A record was expected, something other than an object was found.
    NotAnObject = "not_an_object" => Validation,
    /// A field holds a JSON value of the wrong type (a string, null or non-integer number for an integer, …).
    WrongType = "wrong_type" => Validation,
    /// An integer lies outside its declared width (negative for unsigned, above u32/u64/i32, …).
    IntegerOutOfRange = "integer_out_of_range" => Validation,
    /// A record or enum variant holds a field it does not declare.
    UnknownField = "unknown_field" => Validation,
    /// A record or enum variant lacks a required field.
    MissingField = "missing_field" => Validation,
    /// A tag or enumeration string names no known variant.
    UnknownVariant = "unknown_variant" => Validation,
    /// A tagged enum object has no tag field.
    MissingTag = "missing_tag" => Validation,
    /// A protocol version other than 1.
    BadVersion = "bad_version" => Validation,
    /// An `initialize` descriptor that is not exactly the v1 descriptor.
    DescriptorMismatch = "descriptor_mismatch" => Validation,
    /// A policy field outside its range.
    PolicyOutOfRange = "policy_out_of_range" => Validation,
    /// An error record over its item or text bounds, or with an invalid label span.
    ErrorRecordBounds = "error_record_bounds" => Validation,
    /// Any other domain bound of a record (source size, command size, value depth, registration bounds, …).
    DomainBounds = "domain_bounds" => Validation,
    /// A response whose `ok`, `result` and `error` disagree.
    InconsistentResponse = "inconsistent_response" => Validation,
    /// A host response without exactly one of `outcome` and `error`.
    InconsistentHostResponse = "inconsistent_host_response" => Validation,
    /// An id that does not match the session state (request id not increasing, response or host call for another request, call id out of order).
    IdentityMismatch = "identity_mismatch" => Validation,
    /// A frame that the session state does not allow now (request before initialize, second initialize, response with nothing in flight, …).
    UnexpectedFrame = "unexpected_frame" => Validation,
    /// More host calls in one request than allowed.
    HostCallLimit = "host_call_limit" => Validation,
    /// The session failed earlier; it accepts and sends nothing any more.
    SessionPoisoned = "session_poisoned" => Validation,
    /// Reading or writing the underlying stream failed (not a peer violation).
    IoError = "io_error" => Io,
    /// The peer's stream ended at a frame boundary while the session still
    /// expected a frame from it (SPEC §9.5): a request in flight on the
    /// parent's side, a request or host call in flight on the worker's side.
    UnexpectedEnd = "unexpected_end" => Io,
    /// The caller of a connection asked for something the session state does
    /// not allow (a second `initialize`, a request while one is in flight, a
    /// response with nothing in flight, …). Nothing was written and the
    /// session is not poisoned. Never sent on the wire and never a peer's
    /// fault (SPEC §11.2).
    InvalidUse = "invalid_use" => Validation,
    /// The worker retired (SPEC §13.1-b): after answering a request with a
    /// `resource_limit` error it ended its session, and the parent found
    /// its stream ended, or its stdin closed, before any byte of the next
    /// request's answer. The request that met it was not run; the worker
    /// serves no further request. Not a violation (nothing is poisoned),
    /// but final: a new worker is needed. Reported as `lua` ("unavailable",
    /// SPEC §9.5, §11.3).
    WorkerRetired = "worker_retired" => Lua,
    /// The deadline of the request in flight passed (SPEC §10: the
    /// policy's `wall_time_ms` after the request was sent, host calls
    /// included) before its answer arrived: the parent abandoned the
    /// session, and the worker must be killed (SPEC §13.2). Found by
    /// [`ParentConnection::handle_timeout`](crate::ParentConnection::handle_timeout);
    /// every later call on the connection is refused with this kind too.
    /// Not a violation and never sent on the wire. Reported as
    /// `resource_limit` (SPEC §11.3).
    DeadlinePassed = "deadline_passed" => ResourceLimit,
    /// The parent cancelled the session
    /// ([`ParentConnection::cancel`](crate::ParentConnection::cancel), a
    /// blocking `Canceller`): the worker must be killed (SPEC §13.2);
    /// every later call is refused with this kind too. Never sent on the
    /// wire. Reported as `resource_limit` (SPEC §11.3).
    Cancelled = "cancelled" => ResourceLimit,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A protocol failure: a stable [`ErrorKind`], a message and optional context.
///
/// The context names where the failure was found, e.g. the JSON path
/// `request.operation.policy.memory_limit_bytes`, or the observed value;
/// `.with_context(…)` comes from [`ErrorContext`] (re-exported at the crate
/// root).
/// An `io_error` keeps the underlying [`std::io::Error`] as its
/// [`source`](std::error::Error::source). Equality compares kind, message
/// and context (not the source).
#[derive(Debug, Clone)]
pub struct ProtocolError {
    kind: ErrorKind,
    message: String,
    context: String,
    source: Option<Arc<std::io::Error>>,
}

impl PartialEq for ProtocolError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message && self.context == other.context
    }
}

impl Eq for ProtocolError {}

impl ProtocolError {
    /// [`ErrorContext::with_context`], callable without importing the
    /// trait (as before the trait existed): the same builder, which
    /// appends `context` after the context already there.
    #[must_use]
    pub fn with_context(self, context: impl Into<String>) -> Self {
        ErrorContext::with_context(self, context)
    }

    /// Create an error of `kind` with a human-readable message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            context: String::new(),
            source: None,
        }
    }

    /// An `io_error`: `doing` failed with `error`, which is kept as the
    /// error's [`source`](std::error::Error::source).
    pub fn io(doing: &str, error: std::io::Error) -> Self {
        let mut wrapped = Self::new(ErrorKind::IoError, format!("{doing} failed: {error}"));
        wrapped.source = Some(Arc::new(error));
        wrapped
    }

    /// The underlying I/O error of an `io_error`, if any.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        self.source.as_deref()
    }

    /// Whether this reports a mistake of the caller (`invalid_use`) rather
    /// than anything about the peer or the stream.
    pub const fn is_invalid_use(&self) -> bool {
        matches!(self.kind, ErrorKind::InvalidUse)
    }

    /// The stable sub-kind.
    pub const fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The error code a caller reports, per SPEC §11.3: the kind's code
    /// ([`ErrorKind::code`]), except that a worker that is gone
    /// (`unexpected_end`: it crashed or quit mid-request; `worker_retired`)
    /// is `lua`, and a read deadline that passed is `resource_limit` (as
    /// are `deadline_passed` and `cancelled` by their kind).
    pub fn code(&self) -> ErrorCode {
        if self.is_timed_out() {
            return ErrorCode::ResourceLimit;
        }
        match self.kind {
            ErrorKind::UnexpectedEnd | ErrorKind::WorkerRetired => ErrorCode::Lua,
            kind => kind.code(),
        }
    }

    /// Whether a deadline passed: the request's own deadline
    /// (`deadline_passed`, SPEC §10: the connection is abandoned and the
    /// worker must be killed, [`must_kill`](crate::ParentConnection::must_kill)),
    /// or a read deadline the caller chose (an `io_error` of kind
    /// `TimedOut`: the connection is not poisoned and nothing was lost).
    pub fn is_timed_out(&self) -> bool {
        self.kind == ErrorKind::DeadlinePassed
            || self.kind == ErrorKind::IoError
                && self
                    .io_error()
                    .is_some_and(|error| error.kind() == std::io::ErrorKind::TimedOut)
    }

    /// Whether the parent cancelled the session (`cancelled`): the worker
    /// must be killed (SPEC §13.2).
    pub const fn is_cancelled(&self) -> bool {
        matches!(self.kind, ErrorKind::Cancelled)
    }

    /// Whether the peer is gone: its stream ended mid-request or inside a
    /// frame, it retired (SPEC §13.1-b), or its end of the pipe is closed.
    pub fn is_peer_gone(&self) -> bool {
        match self.kind {
            ErrorKind::UnexpectedEnd
            | ErrorKind::WorkerRetired
            | ErrorKind::TruncatedHeader
            | ErrorKind::TruncatedFrame => true,
            ErrorKind::IoError => self.io_error().is_some_and(|error| {
                matches!(
                    error.kind(),
                    std::io::ErrorKind::BrokenPipe
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::UnexpectedEof
                )
            }),
            _ => false,
        }
    }

    /// Whether the failure guarantees that nothing of the refused send
    /// reached the peer and nothing ran: a caller mistake (`invalid_use`),
    /// a send refused on a poisoned session, a frame that could not be
    /// encoded (every codec kind on the sending side), or a request that met
    /// a retired worker. `false` for I/O failures, whose partial writes
    /// may have reached the peer, and for an abandoned session
    /// (`deadline_passed`, `cancelled`): the request that met the deadline
    /// was sent and may have run (later refusals send nothing, but the
    /// worker must be killed either way).
    pub fn is_nothing_sent(&self) -> bool {
        !matches!(
            self.kind,
            ErrorKind::IoError
                | ErrorKind::UnexpectedEnd
                | ErrorKind::TruncatedHeader
                | ErrorKind::TruncatedFrame
                | ErrorKind::DeadlinePassed
                | ErrorKind::Cancelled
        )
    }

    /// Whether this is the caller's own mistake (`invalid_use`, SPEC
    /// §11.2): nothing written, the session unchanged.
    pub const fn is_caller_mistake(&self) -> bool {
        self.is_invalid_use()
    }

    /// Whether this reports a violation of the protocol by the peer's bytes
    /// (framing, JSON, schema, domain, identity or state, SPEC §9.6), not
    /// I/O, a gone peer, a caller mistake or an earlier poisoning.
    pub const fn is_protocol_violation(&self) -> bool {
        !matches!(
            self.kind,
            ErrorKind::IoError
                | ErrorKind::UnexpectedEnd
                | ErrorKind::WorkerRetired
                | ErrorKind::DeadlinePassed
                | ErrorKind::Cancelled
                | ErrorKind::InvalidUse
                | ErrorKind::SessionPoisoned
                | ErrorKind::TruncatedHeader
                | ErrorKind::TruncatedFrame
        )
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Where the failure was found (a JSON path), or empty.
    pub fn context(&self) -> &str {
        &self.context
    }

    /// Prefix the JSON path in the context with one more outer field name.
    pub(crate) fn at(mut self, field: &str) -> Self {
        if self.context.is_empty() {
            self.context = field.to_owned();
        } else if self.context.starts_with('[') {
            self.context.insert_str(0, field);
        } else {
            self.context.insert(0, '.');
            self.context.insert_str(0, field);
        }
        self
    }

    /// Prefix the JSON path in the context with an array index.
    pub(crate) fn at_index(self, index: usize) -> Self {
        self.at(&format!("[{index}]"))
    }

    /// Convert into an error record a peer can send (`code`, `message`, context).
    pub fn to_shell_error(&self) -> crate::records::ShellError {
        let mut error = crate::records::ShellError::new(self.code(), self.message.clone())
            .with_context(format!("protocol error: {}", self.kind.as_str()));
        if !self.context.is_empty() {
            error = error.with_context(self.context.clone());
        }
        error
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)?;
        if !self.context.is_empty() {
            write!(f, " (at {})", self.context)?;
        }
        Ok(())
    }
}

/// The context of a protocol error is one text, the location where the
/// failure was found: the first line sets it, a later one is appended after
/// `; ` (the builder is [`ErrorContext::with_context`]).
impl ErrorContext for ProtocolError {
    fn append_context(&mut self, line: String) {
        if self.context.is_empty() {
            self.context = line;
        } else {
            self.context.push_str("; ");
            self.context.push_str(&line);
        }
    }
}

impl std::error::Error for ProtocolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|error| error as &(dyn std::error::Error + 'static))
    }
}

// Constructors used across the crate, one per common failure.
impl ProtocolError {
    pub(crate) fn malformed(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::MalformedJson, message)
    }
    pub(crate) fn wrong_type(expected: &str, found: &str) -> Self {
        Self::new(
            ErrorKind::WrongType,
            format!("expected {expected}, found {found}"),
        )
    }
    pub(crate) fn out_of_range(expected: &str) -> Self {
        Self::new(
            ErrorKind::IntegerOutOfRange,
            format!("integer outside the range of {expected}"),
        )
    }
    pub(crate) fn duplicate_key(key: &str) -> Self {
        Self::new(ErrorKind::DuplicateKey, format!("duplicate key `{key}`"))
    }
    pub(crate) fn unknown_field(key: &str, record: &str) -> Self {
        Self::new(
            ErrorKind::UnknownField,
            format!("unknown field `{key}` in {record}"),
        )
    }
    pub(crate) fn missing_field(field: &str, record: &str) -> Self {
        Self::new(
            ErrorKind::MissingField,
            format!("missing field `{field}` in {record}"),
        )
    }
    pub(crate) fn unknown_variant(value: &str, what: &str) -> Self {
        Self::new(
            ErrorKind::UnknownVariant,
            format!("unknown {what} `{value}`"),
        )
    }
    pub(crate) fn missing_tag(tag: &str, what: &str) -> Self {
        Self::new(
            ErrorKind::MissingTag,
            format!("{what} lacks its tag field `{tag}`"),
        )
    }
    pub(crate) fn domain(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::DomainBounds, message)
    }
    pub(crate) fn invalid_use(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidUse, message)
    }
}
