//! A worker without Lua that breaks exactly one rule of the JSON profile or
//! of the canonical encoding, chosen by its argument: the test double of
//! `tests/mutants.rs`, which shows that each isolating case of the worker
//! suite fails for the one worker that breaks its rule and for no other.
//! It is not a worker to copy: every mutation is a defect on purpose.
//!
//! Without an argument it is a correct Lua-free worker (SPEC §19.2) that
//! also answers `return <float literal>` with that float, so that the float
//! text cases (SPEC §12.1 rule 6) have something to judge. With
//! `--break MUTATION` it rewrites each frame it reads before its strict
//! decoder sees it, or each frame it writes after its canonical encoder
//! made it, the way a laxer implementation would behave:
//!
//! | mutation | the defect |
//! |---|---|
//! | `negative-zero` | `-0` is read as the integer 0 (SPEC §5.6-a) |
//! | `integer-beyond-a-double` | a free-form integer literal beyond a double is accepted (SPEC §5.1, §5.7) |
//! | `integer-beyond-u64` | a free-form integer literal beyond `i64`/`u64` is refused (SPEC §5.7) |
//! | `lone-surrogate` | a lone surrogate escape is accepted unless it is in a `source`, where a size check in UTF-8 would catch it (SPEC §5.1-c) |
//! | `unsorted-keys` | a free-form object whose keys are out of order is refused (SPEC §12.2-a) |
//! | `null-context` | a `null` free-form `context` is refused as missing (SPEC §1.2) |
//! | `exponent-without-sign` | floats are written `1e16`, not `1e+16` (SPEC §12.1 rule 6) |
//! | `integral-float-without-fraction` | integral floats are written `100`, not `100.0` |
//! | `exponent-from-1e-5` | `0.00001` is written `1e-5` |
//! | `padded-exponent` | exponents are written with two digits, `1e-06` |

use quirl_lua_conformance::worker::lua_free::returned_integer;
use quirl_lua_protocol::WorkerEvent;
use quirl_lua_protocol::blocking::WorkerClient;
use quirl_lua_protocol::limits::FRAME_BYTES_MAX;
use quirl_lua_protocol::records::{ErrorCode, Operation, OperationResult, ShellError};
use std::io::{self, Read, Write};
use std::ops::Range;
use std::process::ExitCode;

/// The rule this worker breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mutation {
    None,
    NegativeZero,
    IntegerBeyondADouble,
    IntegerBeyondU64,
    LoneSurrogate,
    UnsortedKeys,
    NullContext,
    ExponentWithoutSign,
    IntegralFloatWithoutFraction,
    ExponentFrom1e5,
    PaddedExponent,
}

impl Mutation {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "negative-zero" => Self::NegativeZero,
            "integer-beyond-a-double" => Self::IntegerBeyondADouble,
            "integer-beyond-u64" => Self::IntegerBeyondU64,
            "lone-surrogate" => Self::LoneSurrogate,
            "unsorted-keys" => Self::UnsortedKeys,
            "null-context" => Self::NullContext,
            "exponent-without-sign" => Self::ExponentWithoutSign,
            "integral-float-without-fraction" => Self::IntegralFloatWithoutFraction,
            "exponent-from-1e-5" => Self::ExponentFrom1e5,
            "padded-exponent" => Self::PaddedExponent,
            _ => return None,
        })
    }
}

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let mutation = match arguments.as_slice() {
        [] => Mutation::None,
        [flag, name] if flag == "--break" => match Mutation::parse(name) {
            Some(mutation) => mutation,
            None => return ExitCode::from(2),
        },
        _ => return ExitCode::from(2),
    };
    let input = MutatingReader::new(io::stdin().lock(), mutation);
    let output = MutatingWriter::new(io::stderr().lock(), mutation);
    serve(input, output)
}

/// The Lua-free contract (SPEC §19.2), plus floats written as literals.
fn answer(operation: &Operation) -> Option<OperationResult> {
    match operation {
        Operation::Initialize { .. } => Some(OperationResult::Null),
        Operation::Eval { source } => match returned_integer(source) {
            Some(integer) => Some(OperationResult::Value(integer.into())),
            None => returned_float(source).map(|float| OperationResult::Value(float.into())),
        },
        _ => None,
    }
}

/// The value of `return <literal>` for a finite decimal float literal.
fn returned_float(source: &str) -> Option<f64> {
    let literal = source.strip_prefix("return ")?;
    let plain = literal
        .bytes()
        .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b));
    let starts_with_digit = literal
        .trim_start_matches('-')
        .starts_with(|c: char| c.is_ascii_digit());
    if !plain || !starts_with_digit {
        return None;
    }
    literal
        .parse::<f64>()
        .ok()
        .filter(|float| float.is_finite())
}

fn serve(input: impl Read, output: impl Write) -> ExitCode {
    let mut worker = WorkerClient::new(input, output);
    loop {
        match worker.next_event() {
            Ok(Some(WorkerEvent::Request(request))) => {
                let operation = &request.operation;
                let result = answer(operation).ok_or_else(|| {
                    ShellError::new(ErrorCode::InvalidCommand, "this worker runs no Lua")
                });
                if worker.respond_or_error(result).is_err() {
                    return ExitCode::FAILURE;
                }
            }
            Ok(None) => return ExitCode::SUCCESS,
            Ok(Some(_)) | Err(_) => return ExitCode::FAILURE,
        }
    }
}

/// Reads frames from `inner` and hands them on rewritten by the mutation.
/// Anything that is not a whole frame of at most `FRAME_BYTES_MAX` bytes
/// (a truncated or oversized frame) is handed on as it came, at once, so
/// that the strict decoder judges it.
struct MutatingReader<R> {
    inner: R,
    mutation: Mutation,
    pending: Vec<u8>,
    offset: usize,
    passthrough: bool,
}

impl<R: Read> MutatingReader<R> {
    fn new(inner: R, mutation: Mutation) -> Self {
        Self {
            inner,
            mutation,
            pending: Vec::new(),
            offset: 0,
            passthrough: false,
        }
    }

    /// Read up to `count` bytes into `pending`; false at end of input.
    fn fill(&mut self, count: usize) -> io::Result<bool> {
        let start = self.pending.len();
        self.pending.resize(start + count, 0);
        let mut filled = 0;
        while filled < count {
            match self.inner.read(&mut self.pending[start + filled..]) {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        self.pending.truncate(start + filled);
        Ok(filled == count)
    }

    /// Read the next frame into `pending`, rewritten.
    fn next_frame(&mut self) -> io::Result<()> {
        self.pending.clear();
        self.offset = 0;
        if !self.fill(4)? {
            return Ok(());
        }
        let header: [u8; 4] = self.pending[..4].try_into().map_err(io::Error::other)?;
        let length = usize::try_from(u32::from_be_bytes(header)).map_err(io::Error::other)?;
        if length == 0 || length > FRAME_BYTES_MAX {
            self.passthrough = true;
            return Ok(());
        }
        if !self.fill(length)? {
            return Ok(());
        }
        let payload = rewrite_input(&self.pending[4..], self.mutation)?;
        let length = u32::try_from(payload.len()).map_err(io::Error::other)?;
        self.pending.clear();
        self.pending.extend_from_slice(&length.to_be_bytes());
        self.pending.extend_from_slice(&payload);
        Ok(())
    }
}

impl<R: Read> Read for MutatingReader<R> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        if self.offset == self.pending.len() {
            if self.passthrough {
                return self.inner.read(buffer);
            }
            self.next_frame()?;
        }
        let available = &self.pending[self.offset..];
        let count = available.len().min(buffer.len());
        buffer[..count].copy_from_slice(&available[..count]);
        self.offset += count;
        Ok(count)
    }
}

/// Collects the frames written to it and writes them on rewritten.
struct MutatingWriter<W> {
    inner: W,
    mutation: Mutation,
    pending: Vec<u8>,
}

impl<W: Write> MutatingWriter<W> {
    fn new(inner: W, mutation: Mutation) -> Self {
        Self {
            inner,
            mutation,
            pending: Vec::new(),
        }
    }

    /// Write on every whole frame collected so far.
    fn write_frames(&mut self) -> io::Result<()> {
        while let Some(header) = self.pending.get(..4) {
            let header: [u8; 4] = header.try_into().map_err(io::Error::other)?;
            let end = 4 + usize::try_from(u32::from_be_bytes(header)).map_err(io::Error::other)?;
            if self.pending.len() < end {
                break;
            }
            let payload = rewrite_output(&self.pending[4..end], self.mutation);
            let length = u32::try_from(payload.len()).map_err(io::Error::other)?;
            self.inner.write_all(&length.to_be_bytes())?;
            self.inner.write_all(&payload)?;
            self.pending.drain(..end);
        }
        Ok(())
    }
}

impl<W: Write> Write for MutatingWriter<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(bytes);
        self.write_frames()?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.write_frames()?;
        self.inner.flush()
    }
}

/// A JSON value with the byte ranges of its tokens in the payload.
enum Node {
    Object(Vec<(Range<usize>, Node)>),
    Array(Vec<Node>),
    /// The text between the quotes, escapes as written.
    String(Range<usize>),
    Number(Range<usize>),
    /// `true`, `false` or `null`.
    Literal(Range<usize>),
}

/// Deeper documents are left to the strict decoder, unchanged.
const DEPTH_MAX: usize = 200;

/// A lenient reader of token ranges; `None` for anything it cannot read,
/// which is then handed on unchanged.
struct Parser<'a> {
    text: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn parse(text: &[u8]) -> Option<Node> {
        let mut parser = Parser { text, at: 0 };
        let node = parser.value(1)?;
        (parser.at == text.len()).then_some(node)
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.text.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip_whitespace();
        let found = self.text.get(self.at) == Some(&byte);
        if found {
            self.at += 1;
        }
        found
    }

    fn value(&mut self, depth: usize) -> Option<Node> {
        if depth > DEPTH_MAX {
            return None;
        }
        self.skip_whitespace();
        let start = self.at;
        match *self.text.get(self.at)? {
            b'{' => {
                self.at += 1;
                let mut members = Vec::new();
                if self.eat(b'}') {
                    return Some(Node::Object(members));
                }
                loop {
                    self.skip_whitespace();
                    let key = self.string()?;
                    if !self.eat(b':') {
                        return None;
                    }
                    members.push((key, self.value(depth + 1)?));
                    if !self.eat(b',') {
                        return self.eat(b'}').then_some(Node::Object(members));
                    }
                }
            }
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                if self.eat(b']') {
                    return Some(Node::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    if !self.eat(b',') {
                        return self.eat(b']').then_some(Node::Array(items));
                    }
                }
            }
            b'"' => self.string().map(Node::String),
            b't' | b'f' | b'n' => {
                while self.text.get(self.at).is_some_and(u8::is_ascii_alphabetic) {
                    self.at += 1;
                }
                Some(Node::Literal(start..self.at))
            }
            _ => {
                while matches!(
                    self.text.get(self.at),
                    Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                ) {
                    self.at += 1;
                }
                (self.at > start).then_some(Node::Number(start..self.at))
            }
        }
    }

    fn string(&mut self) -> Option<Range<usize>> {
        if self.text.get(self.at) != Some(&b'"') {
            return None;
        }
        self.at += 1;
        let start = self.at;
        loop {
            match *self.text.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some(start..self.at - 1);
                }
                b'\\' => self.at += 2,
                _ => self.at += 1,
            }
        }
    }
}

impl Node {
    fn member<'n>(&'n self, text: &[u8], name: &str) -> Option<&'n Node> {
        match self {
            Node::Object(members) => members
                .iter()
                .find(|(key, _)| &text[key.clone()] == name.as_bytes())
                .map(|(_, value)| value),
            _ => None,
        }
    }

    /// Every node of this value, this one first.
    fn walk<'n>(&'n self, visit: &mut impl FnMut(&'n Node)) {
        visit(self);
        match self {
            Node::Object(members) => members.iter().for_each(|(_, value)| value.walk(visit)),
            Node::Array(items) => items.iter().for_each(|item| item.walk(visit)),
            Node::String(_) | Node::Number(_) | Node::Literal(_) => {}
        }
    }
}

/// The `context` of a `render_prompt`, `complete` or `contribution`
/// request: the free-form values a parent sends (SPEC §5.7).
fn free_form_context<'n>(root: &'n Node, text: &[u8]) -> Option<&'n Node> {
    let operation = root.member(text, "request")?.member(text, "operation")?;
    let Some(Node::String(name)) = operation.member(text, "operation") else {
        return None;
    };
    let free_form = [&b"render_prompt"[..], b"complete", b"contribution"];
    free_form
        .contains(&&text[name.clone()])
        .then(|| operation.member(text, "context"))
        .flatten()
}

fn is_integer_literal(token: &[u8]) -> bool {
    let digits = token.strip_prefix(b"-").unwrap_or(token);
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

fn number_text(text: &[u8], range: &Range<usize>) -> String {
    String::from_utf8_lossy(&text[range.clone()]).into_owned()
}

/// A payload as the mutated worker reads it: rewritten, or refused.
fn rewrite_input(payload: &[u8], mutation: Mutation) -> io::Result<Vec<u8>> {
    let Some(root) = Parser::parse(payload) else {
        return Ok(payload.to_vec());
    };
    let refuse = |what: &str| Err(io::Error::new(io::ErrorKind::InvalidData, what.to_owned()));
    let context = free_form_context(&root, payload);
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    match mutation {
        Mutation::NegativeZero => root.walk(&mut |node| {
            if let Node::Number(range) = node
                && &payload[range.clone()] == b"-0"
            {
                edits.push((range.clone(), "0".to_owned()));
            }
        }),
        Mutation::IntegerBeyondADouble => {
            context.into_iter().for_each(|value| {
                value.walk(&mut |node| {
                    if let Node::Number(range) = node
                        && is_integer_literal(&payload[range.clone()])
                        && number_text(payload, range)
                            .parse::<f64>()
                            .is_ok_and(f64::is_infinite)
                    {
                        edits.push((range.clone(), "0".to_owned()));
                    }
                });
            });
        }
        Mutation::IntegerBeyondU64 => {
            let mut beyond = false;
            context.into_iter().for_each(|value| {
                value.walk(&mut |node| {
                    if let Node::Number(range) = node
                        && is_integer_literal(&payload[range.clone()])
                    {
                        let token = number_text(payload, range);
                        beyond |= token.parse::<i64>().is_err() && token.parse::<u64>().is_err();
                    }
                });
            });
            if beyond {
                return refuse("an integer beyond i64 and u64");
            }
        }
        Mutation::LoneSurrogate => {
            let mut strings = Vec::new();
            collect_strings_outside_source(&root, payload, &mut strings);
            for range in strings {
                if let Some(fixed) = replace_lone_surrogates(&payload[range.clone()]) {
                    edits.push((range, fixed));
                }
            }
        }
        Mutation::UnsortedKeys => {
            let mut sorted = true;
            context.into_iter().for_each(|value| {
                value.walk(&mut |node| {
                    if let Node::Object(members) = node {
                        sorted &= members
                            .windows(2)
                            .all(|pair| payload[pair[0].0.clone()] < payload[pair[1].0.clone()]);
                    }
                });
            });
            if !sorted {
                return refuse("object keys out of order");
            }
        }
        Mutation::NullContext => {
            if let Some(Node::Literal(range)) = context
                && &payload[range.clone()] == b"null"
            {
                return refuse("context is null");
            }
        }
        Mutation::None
        | Mutation::ExponentWithoutSign
        | Mutation::IntegralFloatWithoutFraction
        | Mutation::ExponentFrom1e5
        | Mutation::PaddedExponent => {}
    }
    Ok(apply(payload, edits))
}

/// The ranges of every string and key, except the values of `source`.
fn collect_strings_outside_source(node: &Node, text: &[u8], out: &mut Vec<Range<usize>>) {
    match node {
        Node::Object(members) => {
            for (key, value) in members {
                out.push(key.clone());
                let is_source = &text[key.clone()] == b"source";
                if !(is_source && matches!(value, Node::String(_))) {
                    collect_strings_outside_source(value, text, out);
                }
            }
        }
        Node::Array(items) => items
            .iter()
            .for_each(|item| collect_strings_outside_source(item, text, out)),
        Node::String(range) => out.push(range.clone()),
        Node::Number(_) | Node::Literal(_) => {}
    }
}

/// The string text with every lone surrogate escape replaced by `\ufffd`,
/// or `None` when it has none.
fn replace_lone_surrogates(raw: &[u8]) -> Option<String> {
    let escape = |at: usize| -> Option<u16> {
        let hex = raw.get(at..at + 6)?.strip_prefix(b"\\u")?;
        u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    };
    let mut out = Vec::with_capacity(raw.len());
    let mut changed = false;
    let mut at = 0;
    while at < raw.len() {
        match escape(at) {
            Some(0xD800..=0xDBFF) if matches!(escape(at + 6), Some(0xDC00..=0xDFFF)) => {
                out.extend_from_slice(&raw[at..at + 12]);
                at += 12;
            }
            Some(0xD800..=0xDFFF) => {
                out.extend_from_slice(b"\\ufffd");
                changed = true;
                at += 6;
            }
            _ if raw[at] == b'\\' => {
                out.extend_from_slice(&raw[at..(at + 2).min(raw.len())]);
                at += 2;
            }
            _ => {
                out.push(raw[at]);
                at += 1;
            }
        }
    }
    changed.then(|| String::from_utf8_lossy(&out).into_owned())
}

/// A payload as the mutated worker writes it.
fn rewrite_output(payload: &[u8], mutation: Mutation) -> Vec<u8> {
    let Some(root) = Parser::parse(payload) else {
        return payload.to_vec();
    };
    let mut edits = Vec::new();
    root.walk(&mut |node| {
        if let Node::Number(range) = node
            && let Some(written) = float_text(&number_text(payload, range), mutation)
        {
            edits.push((range.clone(), written));
        }
    });
    apply(payload, edits)
}

/// How the mutation writes the canonical float text `canonical`, if
/// differently.
fn float_text(canonical: &str, mutation: Mutation) -> Option<String> {
    let (sign, unsigned) = match canonical.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", canonical),
    };
    match mutation {
        Mutation::ExponentWithoutSign => canonical
            .contains("e+")
            .then(|| canonical.replace("e+", "e")),
        Mutation::IntegralFloatWithoutFraction => canonical.strip_suffix(".0").map(str::to_owned),
        Mutation::ExponentFrom1e5 => {
            let digits = unsigned.strip_prefix("0.0000")?;
            let (first, rest) = digits.split_at(1);
            let point = if rest.is_empty() { "" } else { "." };
            Some(format!("{sign}{first}{point}{rest}e-5"))
        }
        Mutation::PaddedExponent => {
            let (mantissa, exponent) = canonical.split_once('e')?;
            let (exponent_sign, digits) = exponent.split_at(1);
            (digits.len() == 1).then(|| format!("{mantissa}e{exponent_sign}0{digits}"))
        }
        Mutation::None
        | Mutation::NegativeZero
        | Mutation::IntegerBeyondADouble
        | Mutation::IntegerBeyondU64
        | Mutation::LoneSurrogate
        | Mutation::UnsortedKeys
        | Mutation::NullContext => None,
    }
}

/// `text` with each range replaced (the ranges do not overlap).
fn apply(text: &[u8], mut edits: Vec<(Range<usize>, String)>) -> Vec<u8> {
    edits.sort_by_key(|(range, _)| range.start);
    let mut out = Vec::with_capacity(text.len());
    let mut at = 0;
    for (range, replacement) in edits {
        out.extend_from_slice(&text[at..range.start]);
        out.extend_from_slice(replacement.as_bytes());
        at = range.end;
    }
    out.extend_from_slice(&text[at..]);
    out
}
