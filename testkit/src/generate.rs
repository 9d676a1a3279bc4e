//! Structure-aware input: valid `quirl.lua-worker@1` records built from raw
//! fuzzer bytes, and a small order- and duplicate-preserving JSON tree used
//! to rewrite encoded frames (key permutation, whitespace, inserted members).
//!
//! Depends only on `quirl_lua_protocol` and `serde_json`, so the protocol
//! crate's tests use it without linking Lua.

use quirl_lua_protocol::records::{
    CommandOutcome, ContributionKind, ErrorCode, ErrorLabel, ExecutionContext, ExecutionEffects,
    ExecutionInput, ExtensionEvent, ExtensionEventData, HostCall, HostResponse, Operation,
    OutputStream, OutputTarget, ParentFrame, Policy, PolicySettings, Request, Response, ShellError,
    StructuredValue, WorkerFrame,
};
use serde_json::Value;
use std::collections::BTreeMap;

/// A cursor over fuzzer bytes; reads past the end yield zeros, so every
/// input (the empty one included) describes exactly one structure.
pub struct Source<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Source<'a> {
    /// Read from `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    /// Whether every byte was consumed.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or(&[])
    }

    /// One byte (0 after the end).
    pub fn byte(&mut self) -> u8 {
        let byte = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos = self.pos.saturating_add(1);
        byte
    }

    /// A boolean.
    pub fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// A choice in `0..n` (`n` at least 1).
    pub fn below(&mut self, n: usize) -> usize {
        let n = n.max(1);
        if n <= 256 {
            usize::from(self.byte()) % n
        } else {
            let wide = u32::from(self.byte()) << 8 | u32::from(self.byte());
            (wide as usize) % n
        }
    }

    /// A full-width little-endian u64 from the next 8 bytes.
    pub fn raw_u64(&mut self) -> u64 {
        let mut bytes = [0_u8; 8];
        for byte in &mut bytes {
            *byte = self.byte();
        }
        u64::from_le_bytes(bytes)
    }

    /// A u64 in `lo..=hi`, biased towards both ends.
    pub fn u64_in(&mut self, lo: u64, hi: u64) -> u64 {
        let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
        match self.byte() % 8 {
            0 => lo,
            1 => hi,
            2 => lo.saturating_add(1).min(hi),
            3 => hi.saturating_sub(1).max(lo),
            4 => lo.saturating_add(u64::from(self.byte())).min(hi),
            _ => {
                let span = hi - lo;
                if span == u64::MAX {
                    self.raw_u64()
                } else {
                    lo + self.raw_u64() % (span + 1)
                }
            }
        }
    }

    /// Any u64, biased towards interesting values.
    pub fn any_u64(&mut self) -> u64 {
        const SPECIAL: [u64; 10] = [
            0,
            1,
            2,
            16,
            17,
            u32::MAX as u64,
            u32::MAX as u64 + 1,
            (1 << 53) + 1,
            i64::MAX as u64,
            u64::MAX,
        ];
        match self.byte() % 4 {
            0 => SPECIAL[self.below(SPECIAL.len())],
            1 => u64::from(self.byte()),
            _ => self.raw_u64(),
        }
    }

    /// Any i64, biased towards interesting values.
    pub fn any_i64(&mut self) -> i64 {
        match self.byte() % 4 {
            0 => [0, -1, 1, i64::MIN, i64::MAX, i64::from(i32::MIN)][self.below(6)],
            1 => i64::from(self.byte() as i8),
            _ => self.raw_u64() as i64,
        }
    }

    /// Any i32.
    pub fn any_i32(&mut self) -> i32 {
        match self.byte() % 3 {
            0 => [0, 1, -1, i32::MIN, i32::MAX, 127, 255][self.below(7)],
            _ => self.raw_u64() as i32,
        }
    }

    /// One character, drawn from an alphabet heavy in JSON-relevant cases.
    pub fn any_char(&mut self) -> char {
        const SPECIAL: [char; 20] = [
            '"',
            '\\',
            '/',
            '\n',
            '\t',
            '\r',
            '\u{0}',
            '\u{1}',
            '\u{1f}',
            '\u{7f}',
            'é',
            'ß',
            '\u{2028}',
            '\u{2029}',
            '\u{feff}',
            '\u{ffff}',
            '😀',
            '\u{10ffff}',
            '=',
            ' ',
        ];
        let byte = self.byte();
        match byte {
            0..=159 => char::from(b'a' + byte % 26),
            160..=199 => char::from(b' ' + byte % 95),
            200..=239 => SPECIAL[usize::from(byte) % SPECIAL.len()],
            _ => {
                let code = u32::from(self.byte()) << 8 | u32::from(self.byte());
                char::from_u32(code).unwrap_or('?')
            }
        }
    }

    /// A string of at most `max` characters.
    pub fn text(&mut self, max: usize) -> String {
        let len = self.below(max + 1);
        (0..len).map(|_| self.any_char()).collect()
    }

    /// A string without `forbidden` characters (replaced by `_`).
    pub fn text_without(&mut self, max: usize, forbidden: &[char]) -> String {
        self.text(max)
            .chars()
            .map(|c| if forbidden.contains(&c) { '_' } else { c })
            .collect()
    }

    /// Raw bytes, at most `max`.
    pub fn bytes(&mut self, max: usize) -> Vec<u8> {
        let len = self.below(max + 1);
        (0..len).map(|_| self.byte()).collect()
    }

    /// A `T` built by `arbitrary::Arbitrary` (the protocol crate's feature
    /// `arbitrary`: values within the protocol's bounds) from the next
    /// bytes, which it consumes; `None` when `T` refused them.
    pub fn arbitrary<T: arbitrary::Arbitrary<'a>>(&mut self) -> Option<T> {
        let rest = self.rest();
        let mut unstructured = arbitrary::Unstructured::new(rest);
        let value = T::arbitrary(&mut unstructured).ok();
        self.pos = self.pos.saturating_add(rest.len() - unstructured.len());
        value
    }
}

// ----- valid records -------------------------------------------------------

/// A policy inside the v1 ranges.
pub fn policy(src: &mut Source<'_>) -> Policy {
    let allow = src.flag();
    let memory = src.u64_in(1, 67_108_864);
    let instructions = src.u64_in(1, 100_000_000);
    let wall = src.u64_in(1, 60_000);
    Policy::new(PolicySettings {
        allow_process: allow,
        memory_limit_bytes: memory,
        instruction_limit: instructions,
        wall_time_ms: wall,
    })
    .unwrap_or_else(|error| {
        panic!("generator made an out-of-range policy ({memory}, {instructions}, {wall}): {error}")
    })
}

/// One of the nine error codes.
pub fn error_code(src: &mut Source<'_>) -> ErrorCode {
    const CODES: [ErrorCode; 9] = [
        ErrorCode::InvalidCommand,
        ErrorCode::InvalidArgument,
        ErrorCode::Data,
        ErrorCode::Io,
        ErrorCode::ProcessSpawn,
        ErrorCode::ScriptRead,
        ErrorCode::Lua,
        ErrorCode::Validation,
        ErrorCode::ResourceLimit,
    ];
    CODES[src.below(CODES.len())]
}

/// Character boundaries of `text` (0 and `len` included).
fn boundaries(text: &str) -> Vec<usize> {
    let mut out: Vec<usize> = text.char_indices().map(|(index, _)| index).collect();
    out.push(text.len());
    out
}

/// A label that passes the v1 bounds.
pub fn error_label(src: &mut Source<'_>) -> ErrorLabel {
    let source = src.flag().then(|| src.text(12));
    let (start, end) = match &source {
        Some(text) if !src.byte().is_multiple_of(4) => {
            let points = boundaries(text);
            let a = points[src.below(points.len())];
            let b = points[src.below(points.len())];
            (a.min(b) as u32, a.max(b) as u32)
        }
        Some(text) => {
            // `end` past the source: no boundary rule applies.
            let end = src.u64_in(text.len() as u64 + 1, u64::from(u32::MAX)) as u32;
            (src.u64_in(0, u64::from(end)) as u32, end)
        }
        None => {
            let end = src.u64_in(0, u64::from(u32::MAX)) as u32;
            (src.u64_in(0, u64::from(end)) as u32, end)
        }
    };
    ErrorLabel {
        source,
        start,
        end,
        message: src.text(8),
    }
}

/// An error record that passes the v1 bounds.
pub fn shell_error(src: &mut Source<'_>) -> ShellError {
    let code = error_code(src);
    let mut error = ShellError::new(code, src.text(16));
    for _ in 0..src.below(3) {
        error.labels.push(error_label(src));
    }
    for _ in 0..src.below(3) {
        error.context.push(src.text(8));
    }
    for _ in 0..src.below(3) {
        error.help.push(src.text(8));
    }
    error.command = src.flag().then(|| src.text(8));
    error.exit_status = src.flag().then(|| src.any_i32());
    error
}

/// A structured value of at most `depth` further levels.
pub fn structured_value(src: &mut Source<'_>, depth: usize) -> StructuredValue {
    let choice = src.below(if depth == 0 { 11 } else { 13 });
    match choice {
        0 => StructuredValue::Nothing,
        1 => StructuredValue::Bool(src.flag()),
        2 => StructuredValue::Int(src.any_i64()),
        3 => StructuredValue::UInt(src.any_u64()),
        4 => StructuredValue::Decimal(src.text(6)),
        5 => StructuredValue::String(src.text(10)),
        6 => StructuredValue::Path(src.text(8)),
        7 => StructuredValue::Duration {
            nanoseconds: src.any_u64(),
        },
        8 => StructuredValue::Size {
            bytes: src.any_u64(),
        },
        9 => StructuredValue::DateTime(src.text(8)),
        10 => StructuredValue::Pattern(src.text(8)),
        11 => StructuredValue::List(
            (0..src.below(4))
                .map(|_| structured_value(src, depth - 1))
                .collect(),
        ),
        _ => {
            let mut entries: Vec<(String, StructuredValue)> = Vec::new();
            for _ in 0..src.below(4) {
                let key = src.text(5);
                let value = structured_value(src, depth - 1);
                if !entries.iter().any(|(seen, _)| *seen == key) {
                    entries.push((key, value));
                }
            }
            StructuredValue::Record(entries)
        }
    }
}

/// A finite free-form JSON value of at most `depth` further levels.
pub fn free_value(src: &mut Source<'_>, depth: usize) -> Value {
    match src.below(if depth == 0 { 7 } else { 9 }) {
        0 => Value::Null,
        1 => Value::Bool(src.flag()),
        2 => Value::from(src.any_u64()),
        3 => Value::from(src.any_i64()),
        4 => {
            let float = f64::from_bits(src.raw_u64());
            let float = if float.is_finite() { float } else { 0.5 };
            Value::from(float)
        }
        5 => Value::from([0.0, -0.0, 1.0, 0.1, 1e300, -2.5e-308, 9007199254740993.0][src.below(7)]),
        6 => Value::String(src.text(10)),
        7 => Value::Array(
            (0..src.below(4))
                .map(|_| free_value(src, depth - 1))
                .collect(),
        ),
        _ => {
            let mut map = serde_json::Map::new();
            for _ in 0..src.below(4) {
                let key = src.text(5);
                let value = free_value(src, depth - 1);
                map.insert(key, value);
            }
            Value::Object(map)
        }
    }
}

/// An execution context within every v1 bound.
pub fn execution_context(src: &mut Source<'_>) -> ExecutionContext {
    let arguments = (0..src.below(4)).map(|_| src.text(8)).collect();
    let mut environment = BTreeMap::new();
    for _ in 0..src.below(4) {
        let mut name = src.text_without(6, &['=', '\0']);
        if name.is_empty() {
            name.push('N');
        }
        environment.insert(name, src.text_without(8, &['\0']));
    }
    let mut working_directory = src.text(12);
    if working_directory.is_empty() {
        working_directory.push('/');
    }
    let input = match src.below(3) {
        0 => ExecutionInput::None,
        1 => ExecutionInput::Bytes(src.bytes(16)),
        _ => ExecutionInput::Value(structured_value(src, 3)),
    };
    let output = match src.below(3) {
        0 => OutputTarget::Inherit,
        1 => OutputTarget::Capture {
            max_bytes_per_stream: src.u64_in(1, 1024 * 1024),
        },
        _ => OutputTarget::Value,
    };
    ExecutionContext {
        arguments,
        environment,
        working_directory,
        input,
        output,
        declared_effects: ExecutionEffects {
            read_filesystem: src.flag(),
            write_filesystem: src.flag(),
            spawn_process: src.flag(),
            change_directory: src.flag(),
        },
    }
}

/// An extension event.
pub fn extension_event(src: &mut Source<'_>) -> ExtensionEvent {
    let data = match src.below(9) {
        0 => ExtensionEventData::SessionStart {
            restored: src.flag(),
        },
        1 => ExtensionEventData::SessionRestore {
            session_id: src.text(8),
        },
        2 => ExtensionEventData::DirectoryChanged {
            previous: src.text(8),
            current: src.text(8),
        },
        3 => ExtensionEventData::CommandPlan {
            source: src.text(10),
            effects: (0..src.below(3)).map(|_| src.text(6)).collect(),
        },
        4 => ExtensionEventData::ExecutionProgress {
            completed: src.any_u64(),
            total: src.flag().then(|| src.any_u64()),
            message: src.flag().then(|| src.text(8)),
        },
        5 => ExtensionEventData::Output {
            stream: if src.flag() {
                OutputStream::Stdout
            } else {
                OutputStream::Stderr
            },
            bytes: src.any_u64(),
            text: src.flag().then(|| src.text(8)),
        },
        6 => ExtensionEventData::Cancellation {
            reason: src.text(8),
        },
        7 => ExtensionEventData::Result {
            status: src.any_i32(),
            duration_ms: src.any_u64(),
        },
        _ => ExtensionEventData::Error {
            error: shell_error(src),
        },
    };
    // Only the extension protocol version 2 is valid; the input bytes are
    // still consumed, so committed seeds keep generating the same frames.
    let _ = src.any_u64();
    ExtensionEvent {
        protocol_version: quirl_lua_protocol::limits::EXTENSION_PROTOCOL_VERSION,
        sequence: src.any_u64(),
        data,
    }
}

/// A source string (never above the 4 MiB bound here).
fn source_text(src: &mut Source<'_>) -> String {
    src.text(24)
}

/// One of the twelve operations, valid.
pub fn operation(src: &mut Source<'_>) -> Operation {
    match src.below(12) {
        0 => {
            let policy = policy(src);
            let grants = src
                .flag()
                .then(|| (0..src.below(4)).map(|_| src.text(12)).collect());
            Operation::initialize(policy, grants, src.flag())
        }
        1 => Operation::Eval {
            source: source_text(src),
        },
        2 => Operation::Check {
            source: source_text(src),
            source_name: src.text(8),
        },
        3 => Operation::LoadConfig {
            source: source_text(src),
            source_name: src.text(8),
        },
        4 => Operation::LoadPlugin {
            source: source_text(src),
            source_name: src.text(8),
        },
        5 => Operation::RenderPrompt {
            name: src.text(8),
            context: free_value(src, 3),
        },
        6 => Operation::Complete {
            command: src.text(8),
            context: free_value(src, 3),
        },
        7 => Operation::Contribution {
            kind: [
                ContributionKind::Catalog,
                ContributionKind::Completion,
                ContributionKind::Panel,
            ][src.below(3)],
            name: src.text(8),
            context: free_value(src, 3),
        },
        8 => Operation::Run {
            source: source_text(src),
            source_name: src.text(8),
            context: execution_context(src),
        },
        9 => Operation::PluginCommand {
            name: src.text(8),
            context: execution_context(src),
            deadline_ms: src.u64_in(1, u64::MAX),
        },
        10 => Operation::Event {
            event: extension_event(src),
        },
        _ => Operation::Test {
            source: source_text(src),
            source_name: src.text(8),
        },
    }
}

/// A valid request.
pub fn request(src: &mut Source<'_>) -> Request {
    Request {
        id: src.any_u64(),
        operation: operation(src),
    }
}

/// A valid command outcome.
pub fn command_outcome(src: &mut Source<'_>) -> CommandOutcome {
    CommandOutcome {
        status: src.any_i32(),
        stdout: src.flag().then(|| src.text(12)),
        stderr: src.flag().then(|| src.text(12)),
    }
}

/// A valid host call (call id in `1..=16`).
pub fn host_call(src: &mut Source<'_>) -> HostCall {
    HostCall {
        request_id: src.any_u64(),
        call_id: src.u64_in(1, 16) as u32,
        command: src.text(16),
        deadline_ms: src.any_u64(),
        max_output_bytes: src.u64_in(0, 1024 * 1024),
    }
}

/// A valid host response (call id in `1..=16`).
pub fn host_response(src: &mut Source<'_>) -> HostResponse {
    HostResponse {
        request_id: src.any_u64(),
        call_id: src.u64_in(1, 16) as u32,
        result: if src.flag() {
            Ok(command_outcome(src))
        } else {
            Err(shell_error(src))
        },
    }
}

/// A valid response (free-form result or error record).
pub fn response(src: &mut Source<'_>) -> Response {
    let id = src.any_u64();
    if src.flag() {
        Response::success(id, free_value(src, 3))
    } else {
        Response::failure(id, shell_error(src))
    }
}

/// A valid parent→worker frame.
pub fn parent_frame(src: &mut Source<'_>) -> ParentFrame {
    if !src.byte().is_multiple_of(4) {
        ParentFrame::Request {
            request: request(src),
        }
    } else {
        ParentFrame::HostResponse {
            response: host_response(src),
        }
    }
}

/// A valid worker→parent frame.
pub fn worker_frame(src: &mut Source<'_>) -> WorkerFrame {
    if src.flag() {
        WorkerFrame::Response {
            response: response(src),
        }
    } else {
        WorkerFrame::HostCall {
            call: host_call(src),
        }
    }
}

// ----- a JSON tree that keeps raw tokens, order and duplicates ---------------

/// A parsed JSON text with scalars kept as their raw source tokens.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null`, `true`, `false` or a number, exactly as written.
    Atom(String),
    /// A string token, quotes and escapes included.
    Str(String),
    /// An array.
    Arr(Vec<Json>),
    /// An object: raw key tokens (quoted) and values, in order.
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// Parse a compact or spaced JSON text (no validation beyond structure).
    pub fn parse(text: &str) -> Option<Json> {
        let bytes = text.as_bytes();
        let mut pos = 0;
        let value = parse_json(bytes, &mut pos, 0)?;
        skip_ws(bytes, &mut pos);
        (pos == bytes.len()).then_some(value)
    }

    /// The unescaped key of a raw key token, when it has no escapes.
    pub fn plain_key(raw: &str) -> &str {
        raw.strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .unwrap_or(raw)
    }

    /// Write compactly, in stored order.
    pub fn write(&self, out: &mut String) {
        match self {
            Json::Atom(raw) | Json::Str(raw) => out.push_str(raw),
            Json::Arr(items) => {
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Json::Obj(entries) => {
                out.push('{');
                for (index, (key, value)) in entries.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    out.push_str(key);
                    out.push(':');
                    value.write(out);
                }
                out.push('}');
            }
        }
    }
}

fn skip_ws(bytes: &[u8], pos: &mut usize) {
    while matches!(bytes.get(*pos), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        *pos += 1;
    }
}

fn parse_string_token(bytes: &[u8], pos: &mut usize) -> Option<String> {
    let start = *pos;
    if bytes.get(*pos) != Some(&b'"') {
        return None;
    }
    *pos += 1;
    loop {
        match bytes.get(*pos)? {
            b'"' => {
                *pos += 1;
                break;
            }
            b'\\' => *pos += 2,
            _ => *pos += 1,
        }
    }
    std::str::from_utf8(bytes.get(start..*pos)?)
        .ok()
        .map(str::to_owned)
}

fn parse_json(bytes: &[u8], pos: &mut usize, depth: usize) -> Option<Json> {
    if depth > 200 {
        return None;
    }
    skip_ws(bytes, pos);
    match *bytes.get(*pos)? {
        b'"' => parse_string_token(bytes, pos).map(Json::Str),
        b'[' => {
            *pos += 1;
            let mut items = Vec::new();
            skip_ws(bytes, pos);
            if bytes.get(*pos) == Some(&b']') {
                *pos += 1;
                return Some(Json::Arr(items));
            }
            loop {
                items.push(parse_json(bytes, pos, depth + 1)?);
                skip_ws(bytes, pos);
                match bytes.get(*pos)? {
                    b',' => *pos += 1,
                    b']' => {
                        *pos += 1;
                        return Some(Json::Arr(items));
                    }
                    _ => return None,
                }
            }
        }
        b'{' => {
            *pos += 1;
            let mut entries = Vec::new();
            skip_ws(bytes, pos);
            if bytes.get(*pos) == Some(&b'}') {
                *pos += 1;
                return Some(Json::Obj(entries));
            }
            loop {
                skip_ws(bytes, pos);
                let key = parse_string_token(bytes, pos)?;
                skip_ws(bytes, pos);
                if bytes.get(*pos) != Some(&b':') {
                    return None;
                }
                *pos += 1;
                let value = parse_json(bytes, pos, depth + 1)?;
                entries.push((key, value));
                skip_ws(bytes, pos);
                match bytes.get(*pos)? {
                    b',' => *pos += 1,
                    b'}' => {
                        *pos += 1;
                        return Some(Json::Obj(entries));
                    }
                    _ => return None,
                }
            }
        }
        _ => {
            let start = *pos;
            while matches!(
                bytes.get(*pos),
                Some(b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'+' | b'.')
            ) {
                *pos += 1;
            }
            if *pos == start {
                return None;
            }
            std::str::from_utf8(&bytes[start..*pos])
                .ok()
                .map(|s| Json::Atom(s.to_owned()))
        }
    }
}
