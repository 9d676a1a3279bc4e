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
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Instant;

use crate::poll;
use crate::process_host::Cancel;

/// Bytes read per `read(2)` from the worker's stderr.
pub(crate) const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Why a wait on the transport ended without the wanted progress.
#[derive(Debug)]
pub(crate) enum Interrupt {
    /// The absolute deadline passed.
    Deadline,
    /// The cancellation token fired.
    Cancelled,
    /// The worker process exited (pidfd readable) and its output holds no
    /// more bytes right now.
    WorkerExited,
    /// The worker's stderr reached end of file.
    OutputClosed,
    /// The worker's stdin is closed (`EPIPE`).
    InputClosed,
    /// An unexpected I/O error on a pipe or in `ppoll`.
    Io(io::Error),
}

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
            let written = write_without_sigpipe(input.as_fd(), bytes);
            if written >= 0 {
                let written = usize::try_from(written).unwrap_or(0);
                bytes = bytes.get(written..).unwrap_or_default();
                continue;
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EAGAIN) => {
                    wait(input.as_fd(), libc::POLLOUT, watch)?;
                }
                Some(libc::EINTR) => {}
                Some(libc::EPIPE) => return Err(Interrupt::InputClosed),
                _ => return Err(Interrupt::Io(error)),
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
            wait(self.output.as_fd(), libc::POLLIN, watch)?;
            // The deadline is the parent's: output that is only readable
            // after it is late, even when this thread woke up late to find
            // it (a worker's own wall-time limit always trips after the
            // parent's deadline, so its answer is never taken for a result).
            check_flags(watch)?;
            // SAFETY: reads into our own buffer, bounded by its length.
            let read = unsafe {
                libc::read(
                    self.output.as_raw_fd(),
                    self.buffer.as_mut_ptr().cast::<libc::c_void>(),
                    self.buffer.len(),
                )
            };
            if read > 0 {
                let read = usize::try_from(read).unwrap_or(0);
                return Ok(self.buffer.get(..read).unwrap_or_default());
            }
            if read == 0 {
                return Err(Interrupt::OutputClosed);
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => {}
                _ => return Err(Interrupt::Io(error)),
            }
        }
    }

    /// Read whatever worker output is available right now, without waiting.
    ///
    /// `Ok(None)`: nothing is available; `Err(OutputClosed)`: end of file.
    pub(crate) fn read_available(&mut self) -> Result<Option<&[u8]>, Interrupt> {
        loop {
            // SAFETY: reads into our own buffer, bounded by its length.
            let read = unsafe {
                libc::read(
                    self.output.as_raw_fd(),
                    self.buffer.as_mut_ptr().cast::<libc::c_void>(),
                    self.buffer.len(),
                )
            };
            if read > 0 {
                let read = usize::try_from(read).unwrap_or(0);
                return Ok(Some(self.buffer.get(..read).unwrap_or_default()));
            }
            if read == 0 {
                return Err(Interrupt::OutputClosed);
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EAGAIN) => return Ok(None),
                Some(libc::EINTR) => {}
                _ => return Err(Interrupt::Io(error)),
            }
        }
    }

    /// Discard worker output until end of file or `deadline`.
    ///
    /// Used after the kill: end of file means every process that held the
    /// response pipe is gone. Returns whether end of file was reached.
    pub(crate) fn drain_until_closed(&mut self, deadline: Instant) -> io::Result<bool> {
        loop {
            // SAFETY: reads into our own buffer, bounded by its length.
            let read = unsafe {
                libc::read(
                    self.output.as_raw_fd(),
                    self.buffer.as_mut_ptr().cast::<libc::c_void>(),
                    self.buffer.len(),
                )
            };
            if read == 0 {
                return Ok(true);
            }
            if read > 0 {
                continue;
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EAGAIN) => {
                    let mut fds = [poll::interest(self.output.as_fd(), libc::POLLIN)];
                    if !poll::wait_until(&mut fds, deadline)? {
                        return Ok(false);
                    }
                }
                Some(libc::EINTR) => {}
                _ => return Err(error),
            }
        }
    }
}

/// `write(2)` that turns a closed pipe into `EPIPE` without letting
/// `SIGPIPE` kill a host process that does not ignore it.
///
/// Rust binaries ignore `SIGPIPE`; a host embedding this library might not.
/// When the signal is not ignored it is blocked in this thread for the
/// write, and a `SIGPIPE` the write raised is consumed before unblocking.
fn write_without_sigpipe(fd: BorrowedFd<'_>, bytes: &[u8]) -> isize {
    let write = || {
        // SAFETY: writes from a live slice to a descriptor we own.
        unsafe {
            libc::write(
                fd.as_raw_fd(),
                bytes.as_ptr().cast::<libc::c_void>(),
                bytes.len(),
            )
        }
    };
    // SAFETY: all-zero is a valid sigaction; sigaction only reads the
    // current disposition into it.
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: null new action = query only.
    let queried = unsafe { libc::sigaction(libc::SIGPIPE, std::ptr::null(), &raw mut current) };
    if queried == 0 && current.sa_sigaction == libc::SIG_IGN {
        return write();
    }
    // SAFETY: sigset_t is plain data; the libc calls initialise and modify
    // sets we own, and the thread mask is restored before returning.
    unsafe {
        let mut pipe_only: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut pipe_only);
        libc::sigaddset(&raw mut pipe_only, libc::SIGPIPE);
        libc::sigpending(&raw mut pending);
        let already_pending = libc::sigismember(&raw const pending, libc::SIGPIPE) == 1;
        libc::pthread_sigmask(libc::SIG_BLOCK, &raw const pipe_only, &raw mut previous);
        let written = write();
        let errno = *libc::__errno_location();
        if written < 0 && errno == libc::EPIPE && !already_pending {
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            libc::sigtimedwait(&raw const pipe_only, std::ptr::null_mut(), &raw const zero);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &raw const previous, std::ptr::null_mut());
        *libc::__errno_location() = errno;
        written
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
fn wait(fd: BorrowedFd<'_>, events: libc::c_short, watch: Watch<'_>) -> Result<(), Interrupt> {
    let mut fds = [
        poll::interest(fd, events),
        poll::interest(watch.cancel_wake, libc::POLLIN),
        watch
            .exit
            .map_or(poll::IGNORED, |exit| poll::interest(exit, libc::POLLIN)),
    ];
    let ready = poll::wait_until(&mut fds, watch.deadline).map_err(Interrupt::Io)?;
    if !ready {
        return Err(Interrupt::Deadline);
    }
    if poll::fired(&fds[0], events) {
        // The pipe is ready (or hung up): let the caller's read/write see it.
        return Ok(());
    }
    if poll::fired(&fds[1], libc::POLLIN) {
        return Err(Interrupt::Cancelled);
    }
    if poll::fired(&fds[2], libc::POLLIN) {
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
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into our array.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
        assert_eq!(rc, 0);
        // SAFETY: both descriptors are fresh and owned by us from here on.
        unsafe {
            use std::os::fd::FromRawFd;
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        }
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
