//! The process entry point: the protocol on stdin/stderr.

use crate::serve::{Ending, ServeOptions, serve};
use std::process::ExitCode;

/// Exit status after the input ended at a frame boundary.
pub const EXIT_END_OF_INPUT: u8 = 0;
/// Exit status after answering and retiring the VM (a budget tripped or
/// `initialize` failed). Nothing went wrong on the wire, so it is 0 too.
pub const EXIT_RETIRED: u8 = 0;
/// Exit status after a protocol violation or a failed read or write.
pub const EXIT_VIOLATION: u8 = 1;

/// Point fd 1 at `/dev/null` so that nothing can ever reach the parent's
/// stdout (the worker never writes it; this is defence in depth).
fn silence_stdout() {
    // SAFETY: plain libc calls on a path literal and our own descriptors;
    // failure leaves stdout as it was, which the worker never writes.
    unsafe {
        let fd = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            libc::dup2(fd, libc::STDOUT_FILENO);
            libc::close(fd);
        }
    }
}

/// Run the worker on this process's stdin and stderr and return its exit
/// status. Frames only ever go to stderr, so panics are not printed (a
/// panic message would corrupt the frame stream); a panic still ends the
/// process with a nonzero status.
pub fn run_stdio_worker() -> ExitCode {
    std::panic::set_hook(Box::new(|_| {}));
    silence_stdout();
    let code = match serve(std::io::stdin(), std::io::stderr(), ServeOptions::default()) {
        Ok(Ending::EndOfInput) => EXIT_END_OF_INPUT,
        Ok(Ending::Retired) => EXIT_RETIRED,
        Err(_) => EXIT_VIOLATION,
    };
    // Exit without running destructors: a retired VM must not be closed.
    std::process::exit(i32::from(code))
}
