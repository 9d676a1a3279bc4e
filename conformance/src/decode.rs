//! `quirl-conformance decode`: decode a framed byte stream and print one
//! line per frame.
//!
//! Output lines, one per frame, in stream order:
//!
//! - `ok <canonical compact JSON>` — the frame decoded; the JSON is its
//!   canonical re-encoding (Quirl's field order, sorted free-form keys).
//! - `error <sub-kind> <message>` — decoding failed with that stable
//!   sub-kind (`truncated_frame`, `unknown_field`, …). Nothing is read or
//!   printed after it: a rejected frame ends the stream, as it ends a session.
//!
//! A stream that ends cleanly at a frame boundary (possibly after zero
//! frames) is a success. This module does no process handling; the binary
//! maps [`Summary::success`] to the exit status.

use quirl_lua_protocol::blocking::FrameReader;
use quirl_lua_protocol::{
    ErrorKind, ProtocolError, decode_parent_frame, decode_worker_frame, encode_parent_frame,
    encode_worker_frame,
};
use std::io::{self, Read, Write};

/// Which decoder to apply: the frames a worker reads or the frames a parent reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Direction {
    /// Frames sent by the parent: `request` and `host_response`.
    ParentToWorker,
    /// Frames sent by the worker: `response` and `host_call`.
    WorkerToParent,
}

/// How a decoded stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Frames that decoded successfully.
    pub frames: usize,
    /// The sub-kind of the error that ended the stream, if any.
    pub error: Option<String>,
}

impl Summary {
    /// Whether every frame decoded and the stream ended at a frame boundary.
    pub fn success(&self) -> bool {
        self.error.is_none()
    }
}

/// Decode one payload of `direction` and return its canonical encoding.
pub fn canonical_payload(direction: Direction, payload: &[u8]) -> Result<Vec<u8>, ProtocolError> {
    match direction {
        Direction::ParentToWorker => encode_parent_frame(&decode_parent_frame(payload)?),
        Direction::WorkerToParent => encode_worker_frame(&decode_worker_frame(payload)?),
    }
}

/// Decode the framed stream `input`, writing one line per frame to `output`.
///
/// Returns `Err` only when writing the report fails; input read errors are
/// reported as an `error io_error …` line.
pub fn decode_stream<R: Read, W: Write>(
    direction: Direction,
    mut input: R,
    mut output: W,
) -> io::Result<Summary> {
    let mut reader = FrameReader::new(&mut input);
    let mut frames = 0;
    loop {
        let payload = match reader.next_payload() {
            Ok(Some(payload)) => payload,
            Ok(None) => return finish(output, frames, None),
            Err(error) if error.kind() == ErrorKind::IoError => {
                let message = error.io_error().map_or_else(
                    || error.to_string(),
                    |io| format!("reading the input failed: {io}"),
                );
                writeln!(output, "error io_error {}", one_line(&message))?;
                output.flush()?;
                return Ok(Summary {
                    frames,
                    error: Some("io_error".to_owned()),
                });
            }
            Err(error) => return finish(output, frames, Some(error)),
        };
        match canonical_payload(direction, &payload) {
            Ok(canonical) => {
                output.write_all(b"ok ")?;
                output.write_all(&canonical)?;
                output.write_all(b"\n")?;
                frames += 1;
            }
            Err(error) => return finish(output, frames, Some(error)),
        }
    }
}

fn finish<W: Write>(
    mut output: W,
    frames: usize,
    error: Option<ProtocolError>,
) -> io::Result<Summary> {
    let kind = match &error {
        Some(error) => {
            writeln!(output, "error {} {}", error.kind(), describe(error))?;
            Some(error.kind().as_str().to_owned())
        }
        None => None,
    };
    output.flush()?;
    Ok(Summary {
        frames,
        error: kind,
    })
}

/// The message and, when known, where in the frame the error was found.
fn describe(error: &ProtocolError) -> String {
    let text = if error.context().is_empty() {
        error.message().to_owned()
    } else {
        format!("{} (at {})", error.message(), error.context())
    };
    one_line(&text)
}

/// Escape control characters so that every report stays on one line.
fn one_line(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const REQUEST: &[u8] = br#"{"kind":"request","request":{"version":1,"id":7,"operation":{"operation":"eval","source":"return 42"}}}"#;

    fn framed(payload: &[u8]) -> Vec<u8> {
        let mut out = u32::try_from(payload.len()).unwrap().to_be_bytes().to_vec();
        out.extend_from_slice(payload);
        out
    }

    fn run(direction: Direction, input: &[u8]) -> (String, Summary) {
        let mut output = Vec::new();
        let summary = decode_stream(direction, input, &mut output).unwrap();
        (String::from_utf8(output).unwrap(), summary)
    }

    #[test]
    fn prints_one_ok_line_per_frame() {
        let mut input = framed(REQUEST);
        input.extend_from_slice(&framed(REQUEST));
        let (text, summary) = run(Direction::ParentToWorker, &input);
        let line = format!("ok {}\n", std::str::from_utf8(REQUEST).unwrap());
        assert_eq!(text, line.repeat(2));
        assert_eq!(
            summary,
            Summary {
                frames: 2,
                error: None
            }
        );
    }

    #[test]
    fn empty_input_is_a_clean_end() {
        let (text, summary) = run(Direction::WorkerToParent, b"");
        assert_eq!(text, "");
        assert!(summary.success());
    }

    #[test]
    fn stops_at_the_first_error() {
        let mut input = framed(REQUEST);
        input.extend_from_slice(&framed(b"{}"));
        input.extend_from_slice(&framed(REQUEST));
        let (text, summary) = run(Direction::ParentToWorker, &input);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with("ok "));
        assert!(lines[1].starts_with("error missing_tag "), "{text}");
        assert_eq!(summary.frames, 1);
        assert_eq!(summary.error.as_deref(), Some("missing_tag"));
    }

    #[test]
    fn truncation_is_reported_at_the_end() {
        let input = framed(REQUEST);
        let (text, summary) = run(Direction::ParentToWorker, &input[..10]);
        assert!(text.starts_with("error truncated_frame "), "{text}");
        assert!(!summary.success());
    }

    #[test]
    fn direction_decides_which_frames_are_valid() {
        let (text, _) = run(Direction::WorkerToParent, &framed(REQUEST));
        assert!(text.starts_with("error unknown_variant "), "{text}");
    }

    #[test]
    fn input_read_errors_are_reported_as_io_error() {
        struct Failing;
        impl Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("boom\nsecond line"))
            }
        }
        let mut output = Vec::new();
        let summary = decode_stream(Direction::ParentToWorker, Failing, &mut output).unwrap();
        let text = String::from_utf8(output).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.starts_with("error io_error "), "{text}");
        assert_eq!(summary.error.as_deref(), Some("io_error"));
    }
}
