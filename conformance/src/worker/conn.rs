//! One worker under test: its process, its three pipes, and the frames it
//! sends, all with deadlines.
//!
//! The runner plays the parent: it writes to the worker's stdin, reads
//! frames from its stderr and watches its stdout (which must stay silent,
//! §3.1). Writes never block: while a large hostile frame is being written
//! the worker's output is drained, and a worker that stops reading makes the
//! write time out instead of hanging the runner.

use crate::proc::{self, Contained};
use quirl_lua_protocol::records::WorkerFrame;
use quirl_lua_protocol::{FrameInbox, ProtocolError, decode_worker_frame};
use rustix::event::PollFlags;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Bytes of stdout kept for the report (anything at all is a failure).
const STDOUT_KEEP_BYTES: usize = 4096;

/// A frame the worker sent, decoded, with its exact bytes.
#[derive(Debug, Clone)]
pub struct Received {
    /// The decoded frame.
    pub frame: WorkerFrame,
    /// The payload as sent (no length prefix).
    pub payload: Vec<u8>,
}

/// What waiting for the worker's next frame produced.
#[derive(Debug)]
pub enum Next {
    /// A frame that decoded.
    Frame(Box<Received>),
    /// Bytes that are not a valid frame (sub-kind and message).
    Invalid(ProtocolError),
    /// The worker closed its stderr at a frame boundary.
    Closed,
    /// Nothing arrived in time.
    Timeout,
}

/// Result of a bounded write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Every byte was written.
    All,
    /// The worker closed its input first (it may legitimately stop reading
    /// after a violation).
    Closed,
    /// The worker did not read the bytes in time.
    Timeout,
}

/// A running worker.
pub struct WorkerConn {
    child: Contained,
    stdin: Option<File>,
    stderr: Option<File>,
    stdout: Option<File>,
    /// The worker's stderr bytes, framed by the protocol crate; no session:
    /// the script provokes and judges what a session would refuse.
    inbox: FrameInbox,
    frames: VecDeque<Next>,
    stdout_bytes: Vec<u8>,
    stdout_total: usize,
    stderr_closed: bool,
}

fn file_from<T: Into<OwnedFd>>(pipe: T) -> std::io::Result<File> {
    let fd: OwnedFd = pipe.into();
    proc::set_nonblocking(fd.as_fd())?;
    Ok(File::from(fd))
}

impl WorkerConn {
    /// Spawn the worker command in a process group of its own, with an
    /// empty environment (only `PATH` kept, as a parent would declare it).
    pub fn spawn(command: &[OsString]) -> std::io::Result<Self> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| std::io::Error::other("empty worker command"))?;
        let env: Vec<(OsString, OsString)> = std::env::var_os("PATH")
            .map(|path| vec![(OsString::from("PATH"), path)])
            .unwrap_or_default();
        let mut child = Contained::spawn_clean(
            program,
            args,
            &env,
            Stdio::piped(),
            Stdio::piped(),
            Stdio::piped(),
        )?;
        let stdin = child.take_stdin().map(file_from).transpose()?;
        let stdout = child.take_stdout().map(file_from).transpose()?;
        let stderr = child.take_stderr().map(file_from).transpose()?;
        Ok(Self {
            child,
            stdin,
            stderr,
            stdout,
            inbox: FrameInbox::new(),
            frames: VecDeque::new(),
            stdout_bytes: Vec::new(),
            stdout_total: 0,
            stderr_closed: false,
        })
    }

    /// The worker's pid (and process group).
    pub fn pid(&self) -> i32 {
        self.child.pid()
    }

    /// Bytes the worker wrote to its stdout so far (must stay zero).
    pub fn stdout_written(&self) -> (usize, &[u8]) {
        (self.stdout_total, &self.stdout_bytes)
    }

    /// Close the worker's stdin (end of stream for the worker).
    pub fn close_input(&mut self) {
        self.stdin = None;
    }

    /// Whether stdin is still open.
    pub fn input_open(&self) -> bool {
        self.stdin.is_some()
    }

    /// Write `bytes` to the worker's stdin within `timeout`, draining its
    /// output meanwhile.
    pub fn write(&mut self, bytes: &[u8], timeout: Duration) -> Written {
        let deadline = Instant::now() + timeout;
        let mut offset = 0;
        while offset < bytes.len() {
            let Some(stdin) = self.stdin.as_mut() else {
                return Written::Closed;
            };
            match proc::write_nonblocking(stdin, &bytes[offset..]) {
                Ok(n) => offset += n,
                Err(_) => {
                    // EPIPE and friends: the worker is not reading any more.
                    self.stdin = None;
                    return Written::Closed;
                }
            }
            if offset == bytes.len() {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                return Written::Timeout;
            }
            self.wait_io(true, (deadline - now).min(Duration::from_millis(50)));
        }
        Written::All
    }

    /// Wait for readiness on the output pipes (and stdin writability when
    /// `want_write`), then drain whatever arrived.
    fn wait_io(&mut self, want_write: bool, timeout: Duration) {
        let mut polls = Vec::with_capacity(4);
        let mut slots = Vec::new();
        if let Some(stderr) = &self.stderr {
            polls.push((stderr.as_fd(), PollFlags::IN));
            slots.push(0);
        }
        if let Some(stdout) = &self.stdout {
            polls.push((stdout.as_fd(), PollFlags::IN));
            slots.push(1);
        }
        if want_write && let Some(stdin) = &self.stdin {
            polls.push((stdin.as_fd(), PollFlags::OUT));
            slots.push(2);
        }
        if let Some(fd) = self.child.exit_fd() {
            polls.push((fd, PollFlags::IN));
            slots.push(3);
        }
        if polls.is_empty() {
            std::thread::sleep(timeout.min(Duration::from_millis(5)));
            return;
        }
        let _ = proc::wait_ready(&polls, timeout);
        self.drain();
    }

    /// Read everything available on stdout and stderr; decode frames.
    fn drain(&mut self) {
        if let Some(stdout) = self.stdout.as_mut() {
            let mut chunk = Vec::new();
            match proc::drain_nonblocking(stdout, &mut chunk, usize::MAX) {
                Ok(open) => {
                    self.stdout_total += chunk.len();
                    let room = STDOUT_KEEP_BYTES.saturating_sub(self.stdout_bytes.len());
                    self.stdout_bytes
                        .extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if !open {
                        self.stdout = None;
                    }
                }
                Err(_) => self.stdout = None,
            }
        }
        let Some(stderr) = self.stderr.as_mut() else {
            return;
        };
        let mut bytes = Vec::new();
        let open = proc::drain_nonblocking(stderr, &mut bytes, usize::MAX).unwrap_or_default();
        if let Err(error) = self.inbox.feed(&bytes) {
            self.invalid(error);
            return;
        }
        loop {
            match self.inbox.next_payload() {
                Ok(None) => break,
                Ok(Some(payload)) => match decode_worker_frame(&payload) {
                    Ok(frame) => self
                        .frames
                        .push_back(Next::Frame(Box::new(Received { frame, payload }))),
                    Err(error) => {
                        self.invalid(error);
                        return;
                    }
                },
                Err(error) => {
                    self.invalid(error);
                    return;
                }
            }
        }
        if !open && self.stderr.is_some() {
            self.stderr = None;
            self.stderr_closed = true;
            match self.inbox.finish() {
                Ok(()) => self.frames.push_back(Next::Closed),
                Err(error) => self.frames.push_back(Next::Invalid(error)),
            }
        }
    }

    /// Bytes that are not a valid frame: reported once, then stderr is
    /// ignored (the worker is judged on the first invalid frame).
    fn invalid(&mut self, error: ProtocolError) {
        self.frames.push_back(Next::Invalid(error));
        self.stderr = None;
    }

    /// The next frame (or end, or invalid bytes) within `timeout`.
    pub fn next(&mut self, timeout: Duration) -> Next {
        let deadline = Instant::now() + timeout;
        loop {
            self.drain();
            if let Some(next) = self.frames.pop_front() {
                return next;
            }
            if self.stderr.is_none() {
                return Next::Closed;
            }
            let now = Instant::now();
            if now >= deadline {
                return Next::Timeout;
            }
            self.wait_io(false, deadline - now);
            // A worker that exited with its stderr held open by nothing
            // produces EOF; one whose pipe is held elsewhere is caught by
            // the deadline.
        }
    }

    /// Wait up to `timeout` for the worker to exit, collecting any frames
    /// it still sends. Returns the status and what it sent meanwhile.
    pub fn wait_exit(&mut self, timeout: Duration) -> (Option<ExitStatus>, Vec<Next>) {
        let deadline = Instant::now() + timeout;
        let mut sent = Vec::new();
        loop {
            self.drain();
            sent.extend(self.frames.drain(..).filter(|n| !matches!(n, Next::Closed)));
            if let Some(status) = self.child.try_status() {
                // Collect what was written just before the exit.
                self.drain();
                sent.extend(self.frames.drain(..).filter(|n| !matches!(n, Next::Closed)));
                return (Some(status), sent);
            }
            let now = Instant::now();
            if now >= deadline {
                return (None, sent);
            }
            self.wait_io(false, (deadline - now).min(Duration::from_millis(20)));
        }
    }

    /// Whether the worker exited already (without waiting).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_status()
    }

    /// Living processes in the worker's process group other than the worker.
    pub fn group_members(&self) -> Vec<proc::ProcStat> {
        let pid = self.pid();
        proc::all_processes()
            .into_iter()
            .filter(|p| p.pgrp == pid && p.pid != pid && p.is_alive())
            .collect()
    }

    /// Kill the worker's group and reap it.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        self.stdin = None;
        self.child.kill_and_reap()
    }
}
