//! The blocking adapters (and, with the `tokio` feature, the async ones):
//! no byte lost across `WouldBlock`, 1-byte reads, partial writes and
//! timeouts; read deadlines; end of stream per SPEC §9.5.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::blocking::{ParentClient, WaitReadable, WorkerClient};
use quirl_lua_protocol::records::*;
use quirl_lua_protocol::*;
use serde_json::json;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// The bytes a worker sends for `initialize` (id 1) and `eval` (id 2) answers.
fn worker_answers() -> Vec<u8> {
    let mut bytes = frame_payload(
        br#"{"kind":"response","response":{"version":1,"id":1,"ok":true,"result":null}}"#,
    )
    .unwrap();
    bytes.extend(
        frame_payload(
            br#"{"kind":"response","response":{"version":1,"id":2,"ok":true,"result":42}}"#,
        )
        .unwrap(),
    );
    bytes
}

/// A non-blocking reader: each `read` returns at most one byte, and every
/// other call fails with `WouldBlock`.
struct Trickle {
    bytes: VecDeque<u8>,
    calls: usize,
}

impl Read for Trickle {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        self.calls += 1;
        if self.calls.is_multiple_of(2) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        match self.bytes.pop_front() {
            Some(byte) => {
                buffer[0] = byte;
                Ok(1)
            }
            None => Ok(0),
        }
    }
}

/// A writer that takes at most two bytes per call and refuses every third call.
#[derive(Default)]
struct Stutter {
    written: Vec<u8>,
    calls: usize,
}

impl Write for Stutter {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        self.calls += 1;
        if self.calls.is_multiple_of(3) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let take = buffer.len().min(2);
        self.written.extend_from_slice(&buffer[..take]);
        Ok(take)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn retry<T>(mut step: impl FnMut() -> Result<T, ProtocolError>) -> T {
    loop {
        match step() {
            Ok(value) => return value,
            Err(error) => {
                let would_block = error
                    .io_error()
                    .is_some_and(|io| io.kind() == io::ErrorKind::WouldBlock);
                assert!(would_block, "unexpected error {error}");
                // The io::Error is kept as the source.
                assert!(std::error::Error::source(&error).is_some());
            }
        }
    }
}

#[test]
fn a_non_blocking_reader_and_writer_lose_no_byte() {
    let reader = Trickle {
        bytes: worker_answers().into(),
        calls: 0,
    };
    let mut client = ParentClient::new(reader, Stutter::default());
    let init = Operation::initialize(Policy::quirl_config_profile(), None, false);
    // The request is encoded once; a refused write leaves the rest pending.
    match client.request(init) {
        Ok(_) => {}
        Err(error) => {
            assert_eq!(error.kind(), ErrorKind::IoError);
            retry(|| client.flush());
        }
    }
    let first = retry(|| client.next_event()).unwrap();
    assert!(matches!(
        first,
        ParentEvent::Response {
            id: 1,
            result: Ok(OperationResult::Null),
            ..
        }
    ));
    if client
        .request(Operation::Eval {
            source: "return 42".into(),
        })
        .is_err()
    {
        retry(|| client.flush());
    }
    let second = retry(|| client.next_event()).unwrap();
    assert!(matches!(
        second,
        ParentEvent::Response { id: 2, result: Ok(OperationResult::Value(ref v)), .. } if *v == json!(42)
    ));
    // End of input between requests: clean.
    assert!(retry(|| client.next_event()).is_none());
    let (connection, _, writer) = client.into_parts();
    assert!(connection.is_ended());
    // Exactly the two requests reached the writer, byte for byte.
    let mut check = WorkerConnection::new();
    check.feed(&writer.written).unwrap();
    assert!(matches!(check.poll_event().unwrap(), Some(WorkerEvent::Request(r)) if r.id == 1));
    check.respond(Ok(OperationResult::Null)).unwrap();
    assert!(matches!(check.poll_event().unwrap(), Some(WorkerEvent::Request(r)) if r.id == 2));
    assert!(check.poll_event().unwrap().is_none() && check.is_quiet());
}

#[test]
fn a_worker_client_serves_over_std_streams() {
    // Parent side prepared with a connection; its bytes are the worker's input.
    let mut parent = ParentConnection::new();
    parent
        .request(Operation::initialize(
            Policy::quirl_config_profile(),
            None,
            false,
        ))
        .unwrap();
    let input = parent.take_outgoing();
    let mut worker = WorkerClient::new(input.as_slice(), Vec::new());
    let Some(WorkerEvent::Request(request)) = worker.next_event().unwrap() else {
        panic!("request expected");
    };
    assert_eq!(request.id, 1);
    assert_eq!(
        worker.respond_or_error(Ok(OperationResult::Null)).unwrap(),
        Responded::AsGiven
    );
    assert!(worker.next_event().unwrap().is_none(), "clean end in Ready");
    let (_, _, output) = worker.into_parts();
    parent.feed(&output).unwrap();
    assert!(matches!(
        parent.poll_event().unwrap(),
        Some(ParentEvent::Response {
            result: Ok(OperationResult::Null),
            ..
        })
    ));
}

#[test]
fn a_stream_that_ends_mid_request_is_reported() {
    let mut parent = ParentConnection::new();
    parent
        .request(Operation::initialize(
            Policy::quirl_config_profile(),
            None,
            false,
        ))
        .unwrap();
    let input = parent.take_outgoing();
    // The worker sees initialize, then its input ends before it answers.
    let mut worker = WorkerClient::new(input.as_slice(), Vec::new());
    worker.next_event().unwrap();
    let error = worker.next_event().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::UnexpectedEnd);
    // A parent whose worker quits mid-request.
    let mut client = ParentClient::new(&[][..], Vec::new());
    client
        .request(Operation::initialize(
            Policy::quirl_config_profile(),
            None,
            false,
        ))
        .unwrap();
    assert_eq!(
        client.next_event().unwrap_err().kind(),
        ErrorKind::UnexpectedEnd
    );
}

#[cfg(unix)]
#[test]
fn a_read_deadline_on_a_pipe_times_out_without_losing_bytes() {
    let (reader, mut writer) = io::pipe().unwrap();
    let mut client = ParentClient::new(reader, Vec::new());
    client
        .request(Operation::initialize(
            Policy::quirl_config_profile(),
            None,
            false,
        ))
        .unwrap();
    let answer = worker_answers();
    // Half a frame, then silence: the deadline passes, the half is kept.
    writer.write_all(&answer[..10]).unwrap();
    let error = client
        .next_event_before(Instant::now() + Duration::from_millis(50))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::IoError);
    assert_eq!(
        error.io_error().map(io::Error::kind),
        Some(io::ErrorKind::TimedOut)
    );
    assert!(client.connection().poison_cause().is_none());
    assert!(!client.connection().is_quiet());
    writer.write_all(&answer[10..]).unwrap();
    drop(writer);
    let event = client
        .next_event_before(Instant::now() + Duration::from_secs(30))
        .unwrap();
    assert!(matches!(event, Some(ParentEvent::Response { id: 1, .. })));
    // The eval answer arrived too early: nothing was in flight for it.
    assert_eq!(
        client
            .next_event_before(Instant::now() + Duration::from_secs(30))
            .unwrap_err()
            .kind(),
        ErrorKind::UnexpectedFrame
    );
}

#[test]
fn in_memory_readers_are_always_ready() {
    let mut bytes: &[u8] = b"";
    assert!(bytes.wait_readable(Duration::ZERO).unwrap());
    let mut cursor = io::Cursor::new(vec![1_u8]);
    assert!(cursor.wait_readable(Duration::ZERO).unwrap());
}

#[test]
fn a_failing_writer_keeps_the_io_error_as_source() {
    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::new(io::ErrorKind::BrokenPipe, "closed"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut client = ParentClient::new(&[][..], Broken);
    let error = client
        .request(Operation::initialize(
            Policy::quirl_config_profile(),
            None,
            false,
        ))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::IoError);
    let source = std::error::Error::source(&error).unwrap();
    assert_eq!(
        source.downcast_ref::<io::Error>().map(io::Error::kind),
        Some(io::ErrorKind::BrokenPipe)
    );
    // Nothing was lost: the request is still pending for a retry.
    assert!(!client.connection().outgoing().is_empty());
}

#[cfg(feature = "tokio")]
mod async_adapters {
    use super::*;
    use quirl_lua_protocol::tokio_io::{ParentClient, WorkerClient};

    #[::tokio::test(flavor = "current_thread")]
    async fn parent_and_worker_talk_over_a_duplex_pipe() {
        let (parent_end, worker_end) = ::tokio::io::duplex(64);
        let (parent_read, parent_write) = ::tokio::io::split(parent_end);
        let (worker_read, worker_write) = ::tokio::io::split(worker_end);
        let worker = ::tokio::spawn(async move {
            let mut worker = WorkerClient::new(worker_read, worker_write);
            let mut served = 0;
            while let Some(event) = worker.next_event().await.unwrap() {
                let WorkerEvent::Request(request) = event else {
                    panic!("only requests arrive here");
                };
                let answer = match request.operation {
                    Operation::Initialize { .. } => OperationResult::Null,
                    _ => OperationResult::Value(json!("x".repeat(1000))),
                };
                worker.respond(Ok(answer)).await.unwrap();
                served += 1;
            }
            served
        });
        let mut parent = ParentClient::new(parent_read, parent_write);
        let init = Operation::initialize(Policy::quirl_config_profile(), None, false);
        assert_eq!(parent.call(init).await.unwrap(), Ok(OperationResult::Null));
        for _ in 0..3 {
            let answer = parent
                .call(Operation::Eval {
                    source: "return 1".into(),
                })
                .await
                .unwrap();
            assert_eq!(answer, Ok(OperationResult::Value(json!("x".repeat(1000)))));
        }
        drop(parent); // closes the worker's input: a clean end
        assert_eq!(worker.await.unwrap(), 4);
    }

    #[::tokio::test(flavor = "current_thread")]
    async fn a_timeout_loses_no_byte() {
        let (parent_end, mut worker_end) = ::tokio::io::duplex(1024);
        let (read, write) = ::tokio::io::split(parent_end);
        let mut parent = ParentClient::new(read, write);
        parent
            .request(Operation::initialize(
                Policy::quirl_config_profile(),
                None,
                false,
            ))
            .await
            .unwrap();
        let answer = worker_answers();
        ::tokio::io::AsyncWriteExt::write_all(&mut worker_end, &answer[..7])
            .await
            .unwrap();
        let error = parent
            .next_event_before(Instant::now() + Duration::from_millis(20))
            .await
            .unwrap_err();
        assert_eq!(
            error.io_error().map(io::Error::kind),
            Some(io::ErrorKind::TimedOut)
        );
        assert!(parent.connection().poison_cause().is_none());
        let end = answer.len() / 2 + answer.len() / 4;
        ::tokio::io::AsyncWriteExt::write_all(&mut worker_end, &answer[7..end])
            .await
            .unwrap();
        let event = parent
            .next_event_before(Instant::now() + Duration::from_secs(30))
            .await
            .unwrap();
        assert!(matches!(event, Some(ParentEvent::Response { id: 1, .. })));
        // Part of the next frame arrived while nothing was in flight: the
        // next request finds it (SPEC §9.3) and writes nothing.
        let error = parent
            .request(Operation::Eval {
                source: "return 42".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::UnexpectedFrame);
        assert!(parent.connection().outgoing().is_empty());
    }
}

#[test]
fn a_frame_reader_keeps_partial_frames_across_would_block() {
    let mut stream = worker_answers();
    stream.extend_from_slice(&[0, 0]); // then the stream ends inside a header
    let mut reader = blocking::FrameReader::new(Trickle {
        bytes: stream.into(),
        calls: 0,
    });
    let first = retry(|| reader.next_payload()).unwrap();
    assert!(first.starts_with(br#"{"kind":"response""#));
    let second = retry(|| reader.next_payload()).unwrap();
    assert!(second.ends_with(br#""result":42}}"#));
    let error = loop {
        match reader.next_payload() {
            Err(error) if error.io_error().is_some() => {}
            other => break other.unwrap_err(),
        }
    };
    assert_eq!(error.kind(), ErrorKind::TruncatedHeader);
}
