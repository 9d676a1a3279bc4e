//! The process a guest sees itself run as, under the capabilities `lua.io`
//! and `lua.os` (DESIGN §15.3): its standard input, what it writes to its
//! standard output and error, its environment and its exit status, one
//! request at a time.
//!
//! The worker sets them when a request starts ([`ProcessView::begin`]:
//! for `run` and `plugin_command` from the runner ABI's execution context —
//! input bytes as stdin, the declared environment, and a capture bound when
//! the context asks for captured output; for every other operation an empty
//! stdin, no environment and output discarded) and takes what the request
//! wrote and whether it exited when it ends ([`ProcessView::finish`]). The
//! `io`, `print` and `os` functions of the guest (`super::io`,
//! `super::os`) read and write it in between.
//!
//! Nothing here touches Lua: this module is safe Rust that the guest-facing
//! functions call. What the guest writes is capped per stream by the
//! capture bound (at most [`CAPTURE_BYTES_MAX`] each), so the memory it can
//! hold outside the VM's limit is bounded; discarded output is never
//! stored.

use quirl_lua_protocol::limits::CAPTURE_BYTES_MAX;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Which of the guest's standard streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard input.
    Stdin,
    /// Standard output (`print`, `io.write`, `io.stdout`).
    Stdout,
    /// Standard error (`io.stderr`).
    Stderr,
}

impl Stream {
    /// The stream with number `n` (0, 1, 2, as file descriptors).
    pub fn from_number(n: i64) -> Option<Self> {
        match n {
            0 => Some(Self::Stdin),
            1 => Some(Self::Stdout),
            2 => Some(Self::Stderr),
            _ => None,
        }
    }

    /// The stream's number (its file descriptor's).
    pub fn number(self) -> i64 {
        match self {
            Self::Stdin => 0,
            Self::Stdout => 1,
            Self::Stderr => 2,
        }
    }
}

/// What a request starts with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestProcess {
    /// The bytes `io.read` reads.
    pub stdin: Vec<u8>,
    /// The variables `os.getenv` finds.
    pub environment: BTreeMap<String, String>,
    /// Capture what the guest writes, at most this many bytes per stream
    /// (capped at [`CAPTURE_BYTES_MAX`]); `None` discards it.
    pub capture: Option<u64>,
}

/// What a request left.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinishedProcess {
    /// What it wrote to its standard output (empty unless captured).
    pub stdout: Vec<u8>,
    /// What it wrote to its standard error (empty unless captured).
    pub stderr: Vec<u8>,
    /// The status it passed to `os.exit`, if it called it.
    pub exit: Option<i32>,
    /// Whether standard output and standard error reached the capture
    /// bound (what was written past it was dropped).
    pub cut: [bool; 2],
}

/// How a write went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Every byte was taken (stored, or discarded when not captured).
    All,
    /// The stream's capture bound was reached: only the first bytes, as
    /// many as fit, were taken (a full device, for the guest).
    Full,
}

#[derive(Debug, Default)]
struct State {
    stdin: Vec<u8>,
    /// Bytes of `stdin` already read.
    read: usize,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    capture: Option<usize>,
    environment: BTreeMap<String, String>,
    exit: Option<i32>,
    cut: [bool; 2],
}

/// One VM's view of its process (see the module docs).
#[derive(Debug, Default)]
pub struct ProcessView {
    state: Mutex<State>,
}

/// A part of the guest's input: where it starts in the input buffer and how
/// long it is. The buffer does not change while a request runs, so the
/// bytes stay where [`ProcessView::input`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputSpan {
    /// Address of the first byte (valid until the next [`ProcessView::begin`]).
    pub start: *const u8,
    /// Number of bytes.
    pub len: usize,
}

/// A number read the way Lua's `io.read("n")` reads one: the text of the
/// longest prefix that can start a numeral, at most [`NUMERAL_BYTES_MAX`]
/// bytes (none when it would be longer: Lua then fails the read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Numeral {
    /// The numeral's text and a NUL after it, `None` when it was too long.
    pub text: Option<[u8; NUMERAL_BYTES_MAX + 1]>,
    /// Its length in `text`.
    pub len: usize,
    /// Whitespace skipped before it (for the charge).
    pub skipped: usize,
}

/// Lua's `L_MAXLENNUM`: the longest numeral `io.read("n")` reads.
pub const NUMERAL_BYTES_MAX: usize = 200;

impl ProcessView {
    fn state(&self) -> MutexGuard<'_, State> {
        // A poisoned lock holds plain data that no panic left half written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Start a request: its input, environment and capture bound; nothing
    /// written yet, no exit.
    pub fn begin(&self, request: RequestProcess) {
        let capture_max = usize::try_from(CAPTURE_BYTES_MAX).unwrap_or(usize::MAX);
        let mut state = self.state();
        *state = State {
            stdin: request.stdin,
            read: 0,
            stdout: Vec::new(),
            stderr: Vec::new(),
            capture: request.capture.map(|bytes| {
                usize::try_from(bytes)
                    .unwrap_or(usize::MAX)
                    .min(capture_max)
            }),
            environment: request.environment,
            exit: None,
            cut: [false; 2],
        };
    }

    /// End the request: what it wrote and whether it exited. The view is
    /// empty afterwards (no input, no environment, output discarded).
    pub fn finish(&self) -> FinishedProcess {
        let state = std::mem::take(&mut *self.state());
        FinishedProcess {
            stdout: state.stdout,
            stderr: state.stderr,
            exit: state.exit,
            cut: state.cut,
        }
    }

    /// Write `bytes` to `stream` (stdout or stderr; stdin takes nothing and
    /// is reported [`Written::Full`]).
    pub fn write(&self, stream: Stream, bytes: &[u8]) -> Written {
        let mut state = self.state();
        let Some(capture) = state.capture else {
            return if stream == Stream::Stdin {
                Written::Full
            } else {
                Written::All
            };
        };
        let state = &mut *state;
        let (sink, cut) = match stream {
            Stream::Stdin => return Written::Full,
            Stream::Stdout => (&mut state.stdout, &mut state.cut[0]),
            Stream::Stderr => (&mut state.stderr, &mut state.cut[1]),
        };
        let room = capture.saturating_sub(sink.len());
        if bytes.len() <= room {
            sink.extend_from_slice(bytes);
            Written::All
        } else {
            sink.extend_from_slice(bytes.get(..room).unwrap_or_default());
            *cut = true;
            Written::Full
        }
    }

    /// Record the status of the guest's `os.exit` (the first one counts).
    pub fn exit(&self, status: i32) {
        let mut state = self.state();
        if state.exit.is_none() {
            state.exit = Some(status);
        }
    }

    /// The value of the declared environment variable `name`, as the
    /// address and length of its bytes (valid until the next
    /// [`ProcessView::begin`], which alone changes the environment).
    pub fn getenv(&self, name: &[u8]) -> Option<InputSpan> {
        let state = self.state();
        let name = std::str::from_utf8(name).ok()?;
        state.environment.get(name).map(|value| InputSpan {
            start: value.as_ptr(),
            len: value.len(),
        })
    }

    /// Consume up to `max` bytes of input (Lua's `read(n)`); an empty span
    /// at the end of the input.
    pub fn input(&self, max: usize) -> InputSpan {
        let mut state = self.state();
        let rest = state.stdin.get(state.read..).unwrap_or_default();
        let len = rest.len().min(max);
        let span = InputSpan {
            start: rest.as_ptr(),
            len,
        };
        state.read = state.read.saturating_add(len);
        span
    }

    /// Consume a line of input (Lua's `read("l")`/`read("L")`): the bytes
    /// up to the next newline, which is consumed too and counted in the
    /// span when `keep_newline`. `None` at the end of the input (Lua's read
    /// fails there, and only there).
    pub fn line(&self, keep_newline: bool) -> Option<InputSpan> {
        let mut state = self.state();
        let rest = state.stdin.get(state.read..).unwrap_or_default();
        if rest.is_empty() {
            return None;
        }
        let (len, consumed) = match rest.iter().position(|&b| b == b'\n') {
            Some(at) => (
                if keep_newline {
                    at.saturating_add(1)
                } else {
                    at
                },
                at.saturating_add(1),
            ),
            None => (rest.len(), rest.len()),
        };
        let span = InputSpan {
            start: rest.as_ptr(),
            len,
        };
        state.read = state.read.saturating_add(consumed);
        Some(span)
    }

    /// Whether input is left (Lua's `read(0)`).
    pub fn at_end(&self) -> bool {
        let state = self.state();
        state.read >= state.stdin.len()
    }

    /// Consume a numeral as Lua's `read_number` (liolib.c) does: skip
    /// whitespace, then take an optional sign, `0x`, digits, a decimal
    /// point, digits and an exponent with its sign, as long as the bytes
    /// can continue a numeral; the byte after it stays unread. Whether the
    /// text is a number is Lua's to decide (`lua_stringtonumber`).
    pub fn numeral(&self) -> Numeral {
        let mut state = self.state();
        let start = state.read;
        let input = state.stdin.get(start..).unwrap_or_default();
        let mut reader = NumeralReader {
            input,
            at: 0,
            buffer: [0; NUMERAL_BYTES_MAX + 1],
            len: 0,
            overflow: false,
        };
        while reader.peek().is_some_and(is_lua_space) {
            reader.at = reader.at.saturating_add(1);
        }
        let skipped = reader.at;
        reader.read_numeral();
        let consumed = reader.at;
        let numeral = Numeral {
            text: (!reader.overflow).then_some(reader.buffer),
            len: if reader.overflow { 0 } else { reader.len },
            skipped,
        };
        state.read = start.saturating_add(consumed);
        numeral
    }
}

/// `isspace` in the "C" locale.
fn is_lua_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// liolib.c's `RN` over a byte slice: the current byte is `input[at]`
/// (Lua's look-ahead `c`), accepted bytes go to `buffer`.
struct NumeralReader<'a> {
    input: &'a [u8],
    at: usize,
    /// Never written past `NUMERAL_BYTES_MAX`: the last byte stays NUL.
    buffer: [u8; NUMERAL_BYTES_MAX + 1],
    len: usize,
    overflow: bool,
}

impl NumeralReader<'_> {
    fn peek(&self) -> Option<u8> {
        self.input.get(self.at).copied()
    }

    /// Lua's `nextc`: keep the current byte and move on; fails (and spoils
    /// the numeral) when the buffer is full.
    fn next(&mut self) -> bool {
        if self.len >= NUMERAL_BYTES_MAX {
            self.overflow = true;
            return false;
        }
        match (self.peek(), self.buffer.get_mut(self.len)) {
            (Some(byte), Some(slot)) => {
                *slot = byte;
                self.len = self.len.saturating_add(1);
                self.at = self.at.saturating_add(1);
                true
            }
            _ => false,
        }
    }

    /// Lua's `test2`: accept the current byte if it is one of `set`.
    fn test2(&mut self, set: [u8; 2]) -> bool {
        match self.peek() {
            Some(byte) if byte == set[0] || byte == set[1] => self.next(),
            _ => false,
        }
    }

    /// Lua's `readdigits`.
    fn digits(&mut self, hex: bool) -> usize {
        let mut count = 0usize;
        while self.peek().is_some_and(|b| {
            if hex {
                b.is_ascii_hexdigit()
            } else {
                b.is_ascii_digit()
            }
        }) && self.next()
        {
            count = count.saturating_add(1);
        }
        count
    }

    /// The body of Lua's `read_number` after the spaces.
    fn read_numeral(&mut self) {
        let mut count = 0usize;
        let mut hex = false;
        self.test2(*b"-+");
        if self.test2(*b"00") {
            if self.test2(*b"xX") {
                hex = true;
            } else {
                count = 1;
            }
        }
        count = count.saturating_add(self.digits(hex));
        // The "C" locale's decimal point is '.', which Lua always accepts.
        if self.test2(*b"..") {
            count = count.saturating_add(self.digits(hex));
        }
        if count > 0 && self.test2(if hex { *b"pP" } else { *b"eE" }) {
            self.test2(*b"-+");
            self.digits(false);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn view(stdin: &str, capture: Option<u64>) -> ProcessView {
        let view = ProcessView::default();
        view.begin(RequestProcess {
            stdin: stdin.as_bytes().to_vec(),
            environment: [("HOME".to_owned(), "/home/q".to_owned())].into(),
            capture,
        });
        view
    }

    fn text(span: InputSpan) -> String {
        // SAFETY (test): the span points into the view's input, which
        // lives and does not change until the next `begin`.
        let bytes = unsafe { std::slice::from_raw_parts(span.start, span.len) };
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn numeral(view: &ProcessView) -> Option<String> {
        let n = view.numeral();
        n.text
            .map(|t| String::from_utf8(t.get(..n.len).unwrap().to_vec()).unwrap())
    }

    #[test]
    fn lines_counts_and_the_end_of_input_read_as_lua_reads_them() {
        let v = view("one\ntwo\n\nlast", None);
        assert_eq!(text(v.line(false).unwrap()), "one");
        assert_eq!(text(v.line(true).unwrap()), "two\n");
        assert_eq!(text(v.line(false).unwrap()), "");
        assert!(!v.at_end());
        assert_eq!(text(v.input(2)), "la");
        assert_eq!(text(v.line(true).unwrap()), "st");
        assert!(v.at_end());
        assert!(v.line(false).is_none());
        assert_eq!(v.input(10).len, 0);
    }

    #[test]
    fn numerals_take_the_prefix_lua_takes() {
        let v = view("  42 -3.5e+2x 0x1Fp2 .5 - 1e 0x", None);
        assert_eq!(numeral(&v).as_deref(), Some("42"));
        assert_eq!(numeral(&v).as_deref(), Some("-3.5e+2"));
        assert_eq!(text(v.input(1)), "x");
        assert_eq!(numeral(&v).as_deref(), Some("0x1Fp2"));
        assert_eq!(numeral(&v).as_deref(), Some(".5"));
        assert_eq!(numeral(&v).as_deref(), Some("-"));
        assert_eq!(numeral(&v).as_deref(), Some("1e"));
        assert_eq!(numeral(&v).as_deref(), Some("0x"));
        let long = view(&"1".repeat(300), None);
        assert_eq!(numeral(&long), None);
    }

    #[test]
    fn writes_are_captured_up_to_the_bound_or_discarded() {
        let v = view("", Some(5));
        assert_eq!(v.write(Stream::Stdout, b"abc"), Written::All);
        assert_eq!(v.write(Stream::Stdout, b"defg"), Written::Full);
        assert_eq!(v.write(Stream::Stderr, b"e"), Written::All);
        v.exit(3);
        v.exit(4);
        let done = v.finish();
        assert_eq!(done.stdout, b"abcde");
        assert_eq!(done.stderr, b"e");
        assert_eq!(done.exit, Some(3));
        assert_eq!(done.cut, [true, false]);
        let discard = view("", None);
        assert_eq!(discard.write(Stream::Stdout, &[b'x'; 10_000]), Written::All);
        assert!(discard.finish().stdout.is_empty());
        assert!(discard.getenv(b"HOME").is_none(), "finish empties the view");
        assert_eq!(text(view("", None).getenv(b"HOME").unwrap()), "/home/q");
    }
}
