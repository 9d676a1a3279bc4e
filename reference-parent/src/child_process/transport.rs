//! Byte transport over the worker's pipes, bounded by a deadline.
//!
//! The parent's ends of the worker's stdin and stderr are non-blocking. The
//! calling thread writes and reads them itself and sleeps in one `ppoll`
//! across everything that may end the wait:
//!
//! - the pipe (readable or writable),
//! - the worker's pidfd (the worker exited),
//! - the cancellation token's wake pipe,
//! - the absolute deadline (the `ppoll` timeout).
//!
//! There is no reader thread, so there is no thread to join, nothing to
//! outlive the handle and no extra wake-up hop between "a frame arrived" and
//! "the caller runs". Writes are non-blocking too, so a worker that stops
//! reading its stdin cannot hold a 5 MiB request write past the deadline.
//!
//! What this module is not: it knows nothing about frames or JSON. The worker
//! handle feeds the bytes it gets into the protocol crate's push decoder.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Instant;

use rustix::io::Errno;

use super::poll::{self, PollFlags};
use super::signals::write_without_sigpipe;
use crate::cancel::Cancel;
pub(crate) use crate::supervision::classify::Interrupt;

/// Bytes read per `read(2)` from the worker's stderr.
pub(crate) const READ_CHUNK_BYTES: usize = 64 * 1024;

/// The parent's ends of one worker's protocol pipes.
pub(crate) struct Transport {
    input: Option<OwnedFd>,
    output: OwnedFd,
    buffer: Box<[u8]>,
}

/// What a wait watches besides the pipe itself.
#[derive(Clone, Copy)]
pub(crate) struct Watch<'a> {
    pub(crate) deadline: Instant,
    /// The token whose flag is checked before every wait.
    pub(crate) cancel: &'a Cancel,
    /// A descriptor that becomes readable when `cancel` fires (the worker's
    /// registered wake pipe).
    pub(crate) cancel_wake: BorrowedFd<'a>,
    pub(crate) exit: Option<BorrowedFd<'a>>,
}

impl Transport {
    pub(crate) fn new(input: OwnedFd, output: OwnedFd) -> Self {
        Self {
            input: Some(input),
            output,
            buffer: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
        }
    }

    /// Close the worker's stdin (a conforming worker then exits).
    pub(crate) fn close_input(&mut self) {
        self.input = None;
    }

    /// Write all of `bytes` to the worker's stdin before the deadline.
    pub(crate) fn write_all(
        &mut self,
        mut bytes: &[u8],
        watch: Watch<'_>,
    ) -> Result<(), Interrupt> {
        let Some(input) = self.input.as_ref() else {
            return Err(Interrupt::InputClosed);
        };
        while !bytes.is_empty() {
            check_flags(watch)?;
            match write_without_sigpipe(input.as_fd(), bytes) {
                Ok(written) => bytes = bytes.get(written..).unwrap_or_default(),
                Err(error) => match error.kind() {
                    io::ErrorKind::WouldBlock => wait(input.as_fd(), PollFlags::OUT, watch)?,
                    io::ErrorKind::Interrupted => {}
                    io::ErrorKind::BrokenPipe => return Err(Interrupt::InputClosed),
                    _ => return Err(Interrupt::Io(error)),
                },
            }
        }
        Ok(())
    }

    /// Read the next chunk of worker output, waiting until the deadline.
    ///
    /// Returns a non-empty slice of the bytes read. Output that is already
    /// in the pipe is returned before a worker exit is reported, so a final
    /// frame written just before exiting is not lost.
    pub(crate) fn read_chunk(&mut self, watch: Watch<'_>) -> Result<&[u8], Interrupt> {
        loop {
            check_flags(watch)?;
            // Wait first: the caller reads right after sending a request,
            // when the answer cannot be there yet, so a read-first would
            // cost a wasted EAGAIN system call on every request.
            wait(self.output.as_fd(), PollFlags::IN, watch)?;
            // The deadline is the parent's: output that is only readable
            // after it is late, even when this thread woke up late to find
            // it (a worker's own wall-time limit always trips after the
            // parent's deadline, so its answer is never taken for a result).
            check_flags(watch)?;
            match rustix::io::read(&self.output, &mut self.buffer[..]) {
                Ok(0) => return Err(Interrupt::OutputClosed),
                Ok(read) => return Ok(self.buffer.get(..read).unwrap_or_default()),
                Err(Errno::AGAIN | Errno::INTR) => {}
                Err(error) => return Err(Interrupt::Io(error.into())),
            }
        }
    }

    /// Read whatever worker output is available right now, without waiting.
    ///
    /// `Ok(None)`: nothing is available; `Err(OutputClosed)`: end of file.
    pub(crate) fn read_available(&mut self) -> Result<Option<&[u8]>, Interrupt> {
        loop {
            match rustix::io::read(&self.output, &mut self.buffer[..]) {
                Ok(0) => return Err(Interrupt::OutputClosed),
                Ok(read) => return Ok(Some(self.buffer.get(..read).unwrap_or_default())),
                Err(Errno::AGAIN) => return Ok(None),
                Err(Errno::INTR) => {}
                Err(error) => return Err(Interrupt::Io(error.into())),
            }
        }
    }

    /// Discard worker output until end of file or `deadline`.
    ///
    /// Used after the kill: end of file means every process that held the
    /// response pipe is gone. Returns whether end of file was reached.
    pub(crate) fn drain_until_closed(&mut self, deadline: Instant) -> io::Result<bool> {
        loop {
            match rustix::io::read(&self.output, &mut self.buffer[..]) {
                Ok(0) => return Ok(true),
                Ok(_) | Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => {
                    let mut fds = [poll::interest(self.output.as_fd(), PollFlags::IN)];
                    if !poll::wait_until(&mut fds, deadline)? {
                        return Ok(false);
                    }
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
}

fn check_flags(watch: Watch<'_>) -> Result<(), Interrupt> {
    if watch.cancel.is_cancelled() {
        return Err(Interrupt::Cancelled);
    }
    if Instant::now() >= watch.deadline {
        return Err(Interrupt::Deadline);
    }
    Ok(())
}

/// Sleep until `fd` has `events`, or something in `watch` ends the wait.
fn wait(fd: BorrowedFd<'_>, events: PollFlags, watch: Watch<'_>) -> Result<(), Interrupt> {
    let mut fds = [
        poll::interest(fd, events),
        poll::interest(watch.cancel_wake, PollFlags::IN),
        // Without a pidfd the third slot is left out of the wait below.
        poll::interest(watch.exit.unwrap_or(watch.cancel_wake), PollFlags::IN),
    ];
    let watched = if watch.exit.is_some() { 3 } else { 2 };
    let ready = poll::wait_until(&mut fds[..watched], watch.deadline).map_err(Interrupt::Io)?;
    if !ready {
        return Err(Interrupt::Deadline);
    }
    if poll::fired(&fds[0], events) {
        // The pipe is ready (or hung up): let the caller's read/write see it.
        return Ok(());
    }
    if poll::fired(&fds[1], PollFlags::IN) {
        return Err(Interrupt::Cancelled);
    }
    if watch.exit.is_some() && poll::fired(&fds[2], PollFlags::IN) {
        return Err(Interrupt::WorkerExited);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn nonblocking_pipe() -> (OwnedFd, OwnedFd) {
        use rustix::pipe::{PipeFlags, pipe_with};
        pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).unwrap()
    }

    fn watch<'a>(token: &'a Cancel, waiter: &'a impl AsFd, deadline: Instant) -> Watch<'a> {
        Watch {
            deadline,
            cancel: token,
            cancel_wake: waiter.as_fd(),
            exit: None,
        }
    }

    #[test]
    fn read_returns_bytes_then_reports_closed_output() {
        let (to_parent_r, to_parent_w) = nonblocking_pipe();
        let (to_worker_r, to_worker_w) = nonblocking_pipe();
        drop(to_worker_r);
        let mut transport = Transport::new(to_worker_w, to_parent_r);
        let token = Cancel::new();
        let waiter = token.register().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let writer = std::fs::File::from(to_parent_w);
        std::io::Write::write_all(&mut &writer, b"abc").unwrap();
        drop(writer);
        assert_eq!(
            transport
                .read_chunk(watch(&token, &waiter, deadline))
                .unwrap(),
            b"abc"
        );
        assert!(matches!(
            transport.read_chunk(watch(&token, &waiter, deadline)),
            Err(Interrupt::OutputClosed)
        ));
    }

    #[test]
    fn read_stops_at_the_deadline() {
        let (to_parent_r, _to_parent_w) = nonblocking_pipe();
        let (_to_worker_r, to_worker_w) = nonblocking_pipe();
        let mut transport = Transport::new(to_worker_w, to_parent_r);
        let token = Cancel::new();
        let waiter = token.register().unwrap();
        let deadline = Instant::now() + Duration::from_millis(20);
        assert!(matches!(
            transport.read_chunk(watch(&token, &waiter, deadline)),
            Err(Interrupt::Deadline)
        ));
        assert!(Instant::now() >= deadline);
    }

    #[test]
    fn cancellation_from_another_thread_wakes_a_blocked_read() {
        let (to_parent_r, _to_parent_w) = nonblocking_pipe();
        let (_to_worker_r, to_worker_w) = nonblocking_pipe();
        let mut transport = Transport::new(to_worker_w, to_parent_r);
        let token = Cancel::new();
        let waiter = token.register().unwrap();
        let canceller = token.clone();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            canceller.cancel();
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let result = transport.read_chunk(watch(&token, &waiter, deadline));
        thread.join().unwrap();
        assert!(matches!(result, Err(Interrupt::Cancelled)));
        assert!(Instant::now() < deadline);
    }

    #[test]
    fn a_write_to_a_full_pipe_stops_at_the_deadline() {
        let (to_parent_r, _to_parent_w) = nonblocking_pipe();
        let (_to_worker_r, to_worker_w) = nonblocking_pipe();
        let mut transport = Transport::new(to_worker_w, to_parent_r);
        let token = Cancel::new();
        let waiter = token.register().unwrap();
        let deadline = Instant::now() + Duration::from_millis(20);
        let big = vec![0_u8; 4 * 1024 * 1024];
        assert!(matches!(
            transport.write_all(&big, watch(&token, &waiter, deadline)),
            Err(Interrupt::Deadline)
        ));
    }

    #[test]
    fn a_write_to_a_closed_pipe_reports_closed_input() {
        let (to_parent_r, _to_parent_w) = nonblocking_pipe();
        let (to_worker_r, to_worker_w) = nonblocking_pipe();
        drop(to_worker_r);
        let mut transport = Transport::new(to_worker_w, to_parent_r);
        let token = Cancel::new();
        let waiter = token.register().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        assert!(matches!(
            transport.write_all(b"x", watch(&token, &waiter, deadline)),
            Err(Interrupt::InputClosed)
        ));
    }
}
