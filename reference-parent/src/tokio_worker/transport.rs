//! Byte transport over the worker's pipes for tokio, bounded by a deadline:
//! the blocking transport's non-blocking reads and writes (the same
//! system calls on the same descriptors, DESIGN §17.3), waited on with
//! tokio's `AsyncFd` instead of `ppoll`.
//!
//! A wait ends on the first of: the pipe ready, the cancellation token's
//! `eventfd` readable, the worker's pidfd readable (it exited), the
//! deadline. No task or thread is started for it: the wait is part of the
//! request's own future, and dropping that future ends it.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use ::tokio::io::Interest;
use ::tokio::io::unix::AsyncFd;
use rustix::io::Errno;

use crate::cancel::Cancel;
use crate::child_process::signals::write_without_sigpipe;
use crate::child_process::transport::READ_CHUNK_BYTES;
use crate::supervision::classify::Interrupt;

/// The parent's ends of one worker's protocol pipes, registered with tokio.
pub(super) struct AsyncTransport {
    input: Option<AsyncFd<OwnedFd>>,
    output: AsyncFd<OwnedFd>,
    buffer: Box<[u8]>,
}

/// What a wait watches besides the pipe itself.
#[derive(Clone, Copy)]
pub(super) struct AsyncWatch<'a> {
    pub(super) deadline: Instant,
    pub(super) cancel: &'a Cancel,
    /// Readable once `cancel` fires (the handle's registration).
    pub(super) cancel_wake: &'a AsyncFd<OwnedFd>,
    /// The worker's pidfd, readable once it exited.
    pub(super) exit: Option<&'a AsyncFd<OwnedFd>>,
}

impl AsyncWatch<'_> {
    fn check_flags(&self) -> Result<(), Interrupt> {
        if self.cancel.is_cancelled() {
            return Err(Interrupt::Cancelled);
        }
        if Instant::now() >= self.deadline {
            return Err(Interrupt::Deadline);
        }
        Ok(())
    }

    /// Ends when something other than the pipe ends the wait.
    pub(super) async fn interrupted(&self) -> Interrupt {
        let exit = async {
            match self.exit {
                Some(fd) => match fd.readable().await {
                    Ok(_) => Interrupt::WorkerExited,
                    Err(error) => Interrupt::Io(error),
                },
                None => std::future::pending().await,
            }
        };
        ::tokio::select! {
            biased;
            woken = self.cancel_wake.readable() => match woken {
                Ok(_) => Interrupt::Cancelled,
                Err(error) => Interrupt::Io(error),
            },
            () = ::tokio::time::sleep_until(self.deadline.into()) => Interrupt::Deadline,
            exited = exit => exited,
        }
    }
}

/// Register `fd` (non-blocking) with the current tokio runtime's reactor.
pub(super) fn register(fd: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    if ::tokio::runtime::Handle::try_current().is_err() {
        return Err(io::Error::other(
            "no tokio runtime: the async worker runs inside one, with I/O and time enabled",
        ));
    }
    // SAFETY: `register_with_interest` asks that the descriptor stay open
    // and refer to the same file description for the `AsyncFd`'s whole
    // life, `as_raw_fd` always returning it. An `OwnedFd` owns its one
    // descriptor, closes it only when dropped (after the `AsyncFd` has
    // deregistered it) and cannot be made to hold another.
    unsafe { AsyncFd::register_with_interest(fd, interest) }.map_err(|error| error.into_parts().1)
}

impl AsyncTransport {
    /// Register the worker's non-blocking pipe ends with tokio.
    pub(super) fn new(input: OwnedFd, output: OwnedFd) -> io::Result<Self> {
        Ok(Self {
            input: Some(register(input, Interest::WRITABLE)?),
            output: register(output, Interest::READABLE)?,
            buffer: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
        })
    }

    /// Close the worker's stdin (a conforming worker then exits).
    pub(super) fn close_input(&mut self) {
        self.input = None;
    }

    /// Write all of `bytes` to the worker's stdin before the deadline.
    pub(super) async fn write_all(
        &mut self,
        mut bytes: &[u8],
        watch: AsyncWatch<'_>,
    ) -> Result<(), Interrupt> {
        let Some(input) = self.input.as_ref() else {
            return Err(Interrupt::InputClosed);
        };
        while !bytes.is_empty() {
            watch.check_flags()?;
            match write_without_sigpipe(input.get_ref().as_fd(), bytes) {
                Ok(written) => bytes = bytes.get(written..).unwrap_or_default(),
                Err(error) => match error.kind() {
                    io::ErrorKind::WouldBlock => {
                        let mut ready = ::tokio::select! {
                            biased;
                            ready = input.writable() => ready.map_err(Interrupt::Io)?,
                            interrupt = watch.interrupted() => return Err(interrupt),
                        };
                        ready.clear_ready();
                    }
                    io::ErrorKind::Interrupted => {}
                    io::ErrorKind::BrokenPipe => return Err(Interrupt::InputClosed),
                    _ => return Err(Interrupt::Io(error)),
                },
            }
        }
        Ok(())
    }

    /// Read the next chunk of worker output, waiting until the deadline.
    /// Output already in the pipe is returned before a worker exit is
    /// reported, so a final frame written just before exiting is not lost.
    pub(super) async fn read_chunk(&mut self, watch: AsyncWatch<'_>) -> Result<&[u8], Interrupt> {
        let Self { output, buffer, .. } = self;
        loop {
            watch.check_flags()?;
            let interrupt = ::tokio::select! {
                biased;
                ready = output.readable() => {
                    let mut ready = ready.map_err(Interrupt::Io)?;
                    // The deadline is the parent's: output only readable
                    // after it is late (DESIGN §17.3).
                    watch.check_flags()?;
                    match rustix::io::read(output.get_ref(), &mut buffer[..]) {
                        Ok(0) => return Err(Interrupt::OutputClosed),
                        Ok(read) => return Ok(buffer.get(..read).unwrap_or_default()),
                        Err(Errno::AGAIN) => {
                            ready.clear_ready();
                            continue;
                        }
                        Err(Errno::INTR) => continue,
                        Err(error) => return Err(Interrupt::Io(error.into())),
                    }
                }
                interrupt = watch.interrupted() => interrupt,
            };
            if !matches!(interrupt, Interrupt::WorkerExited) {
                return Err(interrupt);
            }
            // The worker exited: what it wrote first still counts.
            return match rustix::io::read(output.get_ref(), &mut buffer[..]) {
                Ok(0) => Err(Interrupt::OutputClosed),
                Ok(read) => Ok(buffer.get(..read).unwrap_or_default()),
                Err(Errno::AGAIN | Errno::INTR) => Err(Interrupt::WorkerExited),
                Err(error) => Err(Interrupt::Io(error.into())),
            };
        }
    }

    /// Read whatever worker output is available right now, without waiting.
    ///
    /// `Ok(None)`: nothing is available; `Err(OutputClosed)`: end of file.
    pub(super) fn read_available(&mut self) -> Result<Option<&[u8]>, Interrupt> {
        loop {
            match rustix::io::read(self.output.get_ref(), &mut self.buffer[..]) {
                Ok(0) => return Err(Interrupt::OutputClosed),
                Ok(read) => return Ok(Some(self.buffer.get(..read).unwrap_or_default())),
                Err(Errno::AGAIN) => return Ok(None),
                Err(Errno::INTR) => {}
                Err(error) => return Err(Interrupt::Io(error.into())),
            }
        }
    }

    /// Discard worker output until end of file or `until`; whether end of
    /// file was reached (every holder of the pipe is gone).
    pub(super) async fn drain_until_closed(&mut self, until: Instant) -> io::Result<bool> {
        let Self { output, buffer, .. } = self;
        let drain = async {
            loop {
                match rustix::io::read(output.get_ref(), &mut buffer[..]) {
                    Ok(0) => return Ok(true),
                    Ok(_) | Err(Errno::INTR) => {}
                    Err(Errno::AGAIN) => output.readable().await?.clear_ready(),
                    Err(error) => return Err(io::Error::from(error)),
                }
            }
        };
        match ::tokio::time::timeout_at(until.into(), drain).await {
            Ok(drained) => drained,
            Err(_) => Ok(false),
        }
    }
}
