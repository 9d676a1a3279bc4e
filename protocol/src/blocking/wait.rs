//! Waiting for input without reading it: [`WaitReadable`] (`poll(2)` on
//! Unix through `rustix`, always ready for in-memory readers), and the
//! waits of the blocking clients, bounded by a deadline and ended by a
//! [`Canceller`](super::Canceller) (see the [module docs](super)).

use super::cancel::{CancelSignal, cancelled};
use crate::cancellation::{CANCEL_CHECK_INTERVAL, Cancellation};
use crate::error::ProtocolError;
use std::io::{self, Read};
use std::time::{Duration, Instant};

/// A reader that can wait until a `read` would not block, without reading.
pub trait WaitReadable {
    /// Wait at most `timeout` for input (or end of stream) to be readable:
    /// `Ok(true)` if a `read` would return now, `Ok(false)` on timeout.
    fn wait_readable(&mut self, timeout: Duration) -> io::Result<bool>;

    /// The descriptor to `poll(2)` for input, if the reader has one: the
    /// client then waits for it and a [`Canceller`](super::Canceller) at once. Without one
    /// a cancellation is noticed when [`wait_readable`](Self::wait_readable)
    /// returns. `None` unless implemented.
    #[cfg(unix)]
    fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
}

impl<T: WaitReadable + ?Sized> WaitReadable for &mut T {
    fn wait_readable(&mut self, timeout: Duration) -> io::Result<bool> {
        (**self).wait_readable(timeout)
    }

    #[cfg(unix)]
    fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        (**self).poll_fd()
    }
}

impl WaitReadable for &[u8] {
    fn wait_readable(&mut self, _timeout: Duration) -> io::Result<bool> {
        Ok(true)
    }
}

impl<T> WaitReadable for io::Cursor<T> {
    fn wait_readable(&mut self, _timeout: Duration) -> io::Result<bool> {
        Ok(true)
    }
}

/// Any `AsFd` reader, waited on with `poll(2)`.
#[cfg(unix)]
#[derive(Debug)]
pub struct PollReader<T>(pub T);

#[cfg(unix)]
impl<T: Read> Read for PollReader<T> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        self.0.read(buffer)
    }
}

#[cfg(unix)]
impl<T: std::os::fd::AsFd> WaitReadable for PollReader<T> {
    fn wait_readable(&mut self, timeout: Duration) -> io::Result<bool> {
        poll_readable(self.0.as_fd(), timeout)
    }

    fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        Some(self.0.as_fd())
    }
}

/// `timeout` as a `poll(2)` timeout; beyond the range of a timespec, a
/// day (the callers wait again until their deadline).
#[cfg(unix)]
fn poll_timeout(timeout: Duration) -> rustix::event::Timespec {
    rustix::event::Timespec::try_from(timeout).unwrap_or(rustix::event::Timespec {
        tv_sec: 86_400,
        tv_nsec: 0,
    })
}

#[cfg(unix)]
fn poll_readable(fd: std::os::fd::BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    use rustix::event::{PollFd, PollFlags, poll};
    let timeout = poll_timeout(timeout);
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    loop {
        match poll(&mut fds, Some(&timeout)) {
            Ok(ready) => return Ok(ready > 0),
            Err(rustix::io::Errno::INTR) => continue,
            Err(error) => return Err(error.into()),
        }
    }
}

macro_rules! wait_readable_by_poll {
    ($($type:ty),* $(,)?) => {$(
        #[cfg(unix)]
        impl WaitReadable for $type {
            fn wait_readable(&mut self, timeout: Duration) -> io::Result<bool> {
                poll_readable(std::os::fd::AsFd::as_fd(self), timeout)
            }

            fn poll_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
                Some(std::os::fd::AsFd::as_fd(self))
            }
        }
    )*};
}

wait_readable_by_poll!(
    std::process::ChildStdout,
    std::process::ChildStderr,
    std::fs::File,
    std::io::Stdin,
    std::io::PipeReader,
    std::net::TcpStream,
    std::os::unix::net::UnixStream,
);

/// What a wait for input ended with.
pub(super) enum Wait {
    Readable,
    /// The wait's deadline passed.
    Passed,
    Cancelled,
}

/// What ends a client's wait besides input and the deadline: its
/// [`Canceller`](super::Canceller) (a pipe, polled with the reader) and a
/// [`Cancellation`] it watches (checked at every wake-up, at least every
/// [`CANCEL_CHECK_INTERVAL`]).
#[derive(Clone, Copy, Default)]
pub(super) struct Cancel<'a> {
    pub(super) signal: Option<&'a CancelSignal>,
    pub(super) watch: Option<&'a Cancellation>,
}

impl Cancel<'_> {
    /// Whether either source says the client is cancelled.
    pub(super) fn is_cancelled(&self) -> bool {
        cancelled(self.signal) || self.watch.is_some_and(Cancellation::is_cancelled)
    }
}

/// Wait until `reader` is readable, the deadline passes (`None`: no
/// deadline) or the client is cancelled; a reader with a
/// [`poll_fd`](WaitReadable::poll_fd) is polled together with the
/// cancellation pipe. A watched [`Cancellation`] cuts each wait to
/// [`CANCEL_CHECK_INTERVAL`].
pub(super) fn wait_for_input<R: WaitReadable>(
    reader: &mut R,
    deadline: Option<Instant>,
    cancel: Cancel<'_>,
) -> Result<Wait, ProtocolError> {
    let failed = |error| ProtocolError::io("waiting for a frame", error);
    let signal = cancel.signal;
    loop {
        if cancel.is_cancelled() {
            return Ok(Wait::Cancelled);
        }
        let left = match deadline {
            Some(deadline) => deadline.saturating_duration_since(Instant::now()),
            None => Duration::MAX,
        };
        if left.is_zero() {
            return Ok(Wait::Passed);
        }
        let left = match cancel.watch {
            Some(_) => left.min(CANCEL_CHECK_INTERVAL),
            None => left,
        };
        #[cfg(unix)]
        if let (Some(signal), Some(fd)) = (signal, reader.poll_fd()) {
            use rustix::event::{PollFd, PollFlags, poll};
            let timeout = poll_timeout(left);
            let mut fds = [
                PollFd::new(&fd, PollFlags::IN),
                PollFd::new(&signal.woken, PollFlags::IN),
            ];
            match poll(&mut fds, Some(&timeout)) {
                Ok(_) if !fds[1].revents().is_empty() => return Ok(Wait::Cancelled),
                Ok(_) if !fds[0].revents().is_empty() => return Ok(Wait::Readable),
                Ok(_) | Err(rustix::io::Errno::INTR) => continue,
                Err(error) => return Err(failed(error.into())),
            }
        }
        match reader.wait_readable(left) {
            Ok(true) if cancel.is_cancelled() => return Ok(Wait::Cancelled),
            Ok(true) => return Ok(Wait::Readable),
            Ok(false) => {}
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(failed(error)),
        }
    }
}

/// The error of a read deadline the caller chose.
pub(super) fn read_deadline_passed() -> ProtocolError {
    ProtocolError::io(
        "waiting for a frame",
        io::Error::new(io::ErrorKind::TimedOut, "the read deadline passed"),
    )
}

/// Wait until readable or the deadline passes (`TimedOut`).
pub(super) fn wait_until<R: WaitReadable>(
    reader: &mut R,
    deadline: Instant,
) -> Result<(), ProtocolError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(read_deadline_passed());
        }
        match reader.wait_readable(left) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(ProtocolError::io("waiting for a frame", error)),
        }
    }
}
