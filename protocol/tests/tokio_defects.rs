//! Regression tests of the tokio client's defects (issue 24): a cancelled
//! send is resumed by `next_event`, and `close_writer` really closes a
//! child's stdin (SPEC §3.3: the worker then exits 0).
#![cfg(feature = "tokio")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::records::{Operation, Policy};
use quirl_lua_protocol::tokio_io::ParentClient;
use quirl_lua_protocol::{ParentEvent, frame_payload};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;

/// A writer that is not ready the first time it is polled, then takes
/// everything into a shared buffer.
struct SlowStart {
    polled: bool,
    written: Arc<Mutex<Vec<u8>>>,
}

impl AsyncWrite for SlowStart {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buffer: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if !self.polled {
            self.polled = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.written.lock().unwrap().extend_from_slice(buffer);
        Poll::Ready(Ok(buffer.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[tokio::test(flavor = "current_thread")]
async fn next_event_writes_what_a_cancelled_request_left_pending() {
    let answer = frame_payload(
        br#"{"kind":"response","response":{"version":1,"id":1,"ok":true,"result":null}}"#,
    )
    .unwrap();
    let written = Arc::new(Mutex::new(Vec::new()));
    let writer = SlowStart {
        polled: false,
        written: Arc::clone(&written),
    };
    let mut client = ParentClient::new(&answer[..], writer);
    let init = Operation::initialize(Policy::quirl_config_profile(), None, false);
    // The request's future is dropped before its write completed.
    tokio::select! {
        biased;
        _ = client.request(init) => panic!("the writer was not ready"),
        () = std::future::ready(()) => {}
    }
    assert!(written.lock().unwrap().is_empty());
    let event = client.next_event().await.unwrap();
    assert!(matches!(event, Some(ParentEvent::Response { id: 1, .. })));
    // The worker received the whole request before its answer was read.
    let bytes = written.lock().unwrap().clone();
    assert!(bytes.len() > 4);
    assert_eq!(
        &bytes[..4],
        &u32::try_from(bytes.len() - 4).unwrap().to_be_bytes()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn close_writer_closes_a_child_stdin() {
    // `cat` exits only once its stdin is closed; a shutdown of tokio's
    // ChildStdin alone does not close it.
    let mut child = tokio::process::Command::new("cat")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (stdin, stdout) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
    let mut client = ParentClient::new(stdout, stdin);
    client.close_writer().await.unwrap();
    assert!(client.writer_mut().is_none());
    let status = child.wait().await.unwrap();
    assert!(status.success());
    let init = Operation::initialize(Policy::quirl_config_profile(), None, false);
    assert!(client.request(init).await.unwrap_err().is_invalid_use());
}
