//! The physical floor for X2: a raw two-process pipe ping-pong of the same
//! frame sizes as `eval "return 1"`, and CPU pinning.
//!
//! The echo child (`quirl-lua-bench --internal-echo N`) reads a frame the
//! way the reference worker does (4-byte header, then the payload) from
//! stdin and answers each with a fixed N-byte frame on stdout, in one
//! `write`. The client writes the request in one `write` and reads the
//! answer with one `read` of up to 64 KiB, as the parent library does.
//! Nothing is parsed: this is the cost of two pipe writes, two wake-ups and
//! the reads, which no protocol can avoid.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};

/// Mode argument of the echo child.
pub const ECHO_ARGUMENT: &str = "--internal-echo";

/// The echo child's main loop; returns at end of input.
pub fn echo_main(response_bytes: usize) -> io::Result<()> {
    let mut response = vec![b' '; response_bytes.max(5)];
    let len = u32::try_from(response.len() - 4).unwrap_or(0);
    response[..4].copy_from_slice(&len.to_be_bytes());
    let stdin = io::stdin();
    let stdout = io::stdout();
    let mut input = stdin.lock();
    let mut output = stdout.lock();
    let mut payload = vec![0_u8; 64 * 1024];
    loop {
        let mut header = [0_u8; 4];
        match input.read_exact(&mut header) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(error) => return Err(error),
        }
        let n = u32::from_be_bytes(header) as usize;
        if n > payload.len() {
            return Err(io::Error::other("frame too large for the echo child"));
        }
        input.read_exact(&mut payload[..n])?;
        output.write_all(&response)?;
        output.flush()?;
    }
}

/// The extra descriptors of [`Echo::round_trip_parent_pattern`].
pub struct ParentPattern {
    eventfd: OwnedFd,
    pidfd: OwnedFd,
}

/// A running echo child.
pub struct Echo {
    child: Child,
    request: Vec<u8>,
    response_len: usize,
    buffer: Vec<u8>,
}

impl Echo {
    /// Spawn the echo child; `request` is the framed request, `response_len`
    /// the framed response size.
    pub fn spawn(request: Vec<u8>, response_len: usize) -> io::Result<Self> {
        let exe = std::env::current_exe()?;
        let child = Command::new(exe)
            .arg(ECHO_ARGUMENT)
            .arg(response_len.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Self {
            child,
            request,
            response_len,
            buffer: vec![0; 64 * 1024],
        })
    }

    /// One round trip.
    pub fn round_trip(&mut self) -> io::Result<()> {
        let (Some(stdin), Some(stdout)) = (self.child.stdin.as_mut(), self.child.stdout.as_mut())
        else {
            return Err(io::Error::other("echo child pipes missing"));
        };
        stdin.write_all(&self.request)?;
        let mut got = 0;
        while got < self.response_len {
            let n = stdout.read(&mut self.buffer[got..])?;
            if n == 0 {
                return Err(io::Error::other("echo child ended"));
            }
            got += n;
        }
        Ok(())
    }

    /// One round trip with the parent library's system calls around the
    /// same bytes: an idle-check `read` (`EAGAIN`), a `SIGPIPE` disposition
    /// query, the `write`, then `ppoll` over the pipe, an eventfd and a
    /// pidfd before each `read` of the non-blocking pipe. No parsing.
    pub fn round_trip_parent_pattern(&mut self, extra: &ParentPattern) -> io::Result<()> {
        let (Some(stdin), Some(stdout)) = (self.child.stdin.as_mut(), self.child.stdout.as_mut())
        else {
            return Err(io::Error::other("echo child pipes missing"));
        };
        let out = stdout.as_raw_fd();
        // SAFETY: reads into our own buffer, bounded by its length.
        let idle = unsafe { libc::read(out, self.buffer.as_mut_ptr().cast(), self.buffer.len()) };
        if idle >= 0 {
            return Err(io::Error::other("echo child wrote while idle"));
        }
        // SAFETY: a query only (null new action) into our own struct.
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGPIPE, std::ptr::null(), &raw mut current);
        }
        stdin.write_all(&self.request)?;
        let mut got = 0;
        while got < self.response_len {
            let mut fds = [
                libc::pollfd {
                    fd: out,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: extra.eventfd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: extra.pidfd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let timeout = libc::timespec {
                tv_sec: 10,
                tv_nsec: 0,
            };
            // SAFETY: three valid pollfds in our own array; null sigmask.
            let ready =
                unsafe { libc::ppoll(fds.as_mut_ptr(), 3, &raw const timeout, std::ptr::null()) };
            if ready < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: as above.
            let n = unsafe {
                libc::read(
                    out,
                    self.buffer[got..].as_mut_ptr().cast(),
                    self.buffer.len() - got,
                )
            };
            if n == 0 {
                return Err(io::Error::other("echo child ended"));
            }
            if n > 0 {
                got += n as usize;
            }
        }
        Ok(())
    }

    /// Descriptors the parent-pattern round trip polls besides the pipe,
    /// with the pipes switched to non-blocking mode.
    pub fn parent_pattern(&mut self) -> io::Result<ParentPattern> {
        for fd in [
            self.child.stdin.as_ref().map(AsRawFd::as_raw_fd),
            self.child.stdout.as_ref().map(AsRawFd::as_raw_fd),
        ]
        .into_iter()
        .flatten()
        {
            // SAFETY: fcntl on descriptors we own.
            unsafe {
                let flags = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        // SAFETY: eventfd/pidfd_open take no pointers; results are checked
        // and owned from here on.
        unsafe {
            let eventfd = libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK);
            if eventfd < 0 {
                return Err(io::Error::last_os_error());
            }
            let eventfd = OwnedFd::from_raw_fd(eventfd);
            let pid = libc::pid_t::try_from(self.child.id()).map_err(io::Error::other)?;
            let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
            if pidfd < 0 {
                return Err(io::Error::last_os_error());
            }
            let pidfd = OwnedFd::from_raw_fd(i32::try_from(pidfd).map_err(io::Error::other)?);
            Ok(ParentPattern { eventfd, pidfd })
        }
    }

    /// Timed round trips (see [`crate::supervise::round_trips`]); with the
    /// parent library's system calls if `parent_pattern`.
    pub fn measure(
        &mut self,
        parent_pattern: bool,
        warmup: usize,
        n: usize,
    ) -> Result<crate::supervise::RoundTrips, crate::inproc::BoxError> {
        let pid = self.pid();
        if parent_pattern {
            let extra = self.parent_pattern()?;
            crate::supervise::round_trips(pid, warmup, n, || {
                Ok(self.round_trip_parent_pattern(&extra)?)
            })
        } else {
            crate::supervise::round_trips(pid, warmup, n, || Ok(self.round_trip()?))
        }
    }

    /// The child's pid (for affinity checks).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Restrict the calling thread (and the processes it spawns from now on,
/// which inherit the mask) to `cpus`.
pub fn set_affinity(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write into our own
    // set and sched_setaffinity(0, …) reads it for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw const set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Every CPU this process may run on, as found at the first call (call it
/// before pinning anything).
pub fn all_cpus() -> Vec<usize> {
    static ALL: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        affinity_of(std::process::id()).unwrap_or_else(|_| {
            let n = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
            (0..n).collect()
        })
    })
    .clone()
}

/// The CPUs process `pid` may run on.
pub fn affinity_of(pid: u32) -> io::Result<Vec<usize>> {
    // SAFETY: as in `set_affinity`; sched_getaffinity fills our own set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
        if libc::sched_getaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &raw mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect())
    }
}
