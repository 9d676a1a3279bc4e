//! The process entry point: the protocol on stdin/stderr.

use crate::lockdown::FRAME_FD;
use crate::serve::{Ending, ServeOptions, serve};
use std::io::Write;
use std::os::fd::FromRawFd;
use std::process::ExitCode;

/// Exit status after the input ended at a frame boundary.
pub const EXIT_END_OF_INPUT: u8 = 0;
/// Exit status after answering and retiring the VM (a budget tripped or
/// `initialize` failed). Nothing went wrong on the wire, so it is 0 too.
pub const EXIT_RETIRED: u8 = 0;
/// Exit status after a protocol violation or a failed read or write.
pub const EXIT_VIOLATION: u8 = 1;

/// [`FRAME_FD`] as a writer that never closes it (closing is not on the
/// lockdown's allowlist, and the process exits right after serving).
struct FrameWriter(std::mem::ManuallyDrop<std::fs::File>);

impl Write for FrameWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Arrange the descriptors and return where frames are written.
///
/// - fd 1 points at `/dev/null`, so nothing can ever reach the parent's
///   stdout (the worker never writes it; defence in depth);
/// - the stderr pipe is duplicated to [`FRAME_FD`], frames are written
///   there, and fd 2 then points at `/dev/null` too: a message the Rust
///   runtime prints on fd 2 just before it aborts (stack overflow, failed
///   allocation — more likely under the parent's address-space limit) can
///   no longer be mistaken for a frame, so the parent sees the abort
///   itself. The parent still reads the same pipe ("frames on stderr").
///
/// If a step fails, frames go to fd 2 as before.
fn frame_output() -> Box<dyn Write + Send> {
    // SAFETY: plain libc calls on a path literal and our own descriptors;
    // FRAME_FD is owned by the returned File only when dup2 created it.
    unsafe {
        // First the duplicate, so that /dev/null cannot land on FRAME_FD.
        let moved = libc::dup2(libc::STDERR_FILENO, FRAME_FD) == FRAME_FD;
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, libc::STDOUT_FILENO);
            if moved {
                libc::dup2(null, libc::STDERR_FILENO);
            }
            if null > FRAME_FD {
                libc::close(null);
            }
        }
        if moved && null >= 0 {
            Box::new(FrameWriter(std::mem::ManuallyDrop::new(
                std::fs::File::from_raw_fd(FRAME_FD),
            )))
        } else {
            Box::new(std::io::stderr())
        }
    }
}

/// Run the worker on this process's stdin and stderr and return its exit
/// status. A binary calls [`pin_time_zone`](crate::pin_time_zone) first
/// (the capability `lua.os` under the lockdown). Frames only ever go to the stderr pipe (through [`FRAME_FD`]),
/// panics are not printed, and anything else printed on fd 2 goes to
/// `/dev/null`; a panic still ends the process with a nonzero status.
///
/// Arguments (any others, such as `--internal-lua-worker-v1`, are ignored):
/// `--no-lockdown` skips the lockdown after `initialize` (debugging only);
/// `--lockdown-report` prints what the lockdown does on this platform and
/// exits 0 without serving.
pub fn run_stdio_worker() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if args
        .iter()
        .any(|arg| arg == crate::lockdown::REPORT_ARGUMENT)
    {
        print!("{}", crate::lockdown::report());
        return ExitCode::SUCCESS;
    }
    #[cfg(any(debug_assertions, feature = "lockdown-test-hooks"))]
    crate::lockdown::probe::arm_from_args(&args);
    std::panic::set_hook(Box::new(|_| {}));
    let output = frame_output();
    let options = ServeOptions {
        lockdown: crate::lockdown::Lockdown::from_args(&args),
        ..ServeOptions::default()
    };
    let code = match serve(std::io::stdin(), output, options) {
        Ok(Ending::EndOfInput) => EXIT_END_OF_INPUT,
        Ok(Ending::Retired) => EXIT_RETIRED,
        Err(_) => EXIT_VIOLATION,
    };
    // Exit without running destructors: a retired VM must not be closed.
    std::process::exit(i32::from(code))
}
