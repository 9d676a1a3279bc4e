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
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

    /// `n` timed round trips after `warmup` untimed ones.
    pub fn sample(&mut self, warmup: usize, n: usize) -> io::Result<Vec<Duration>> {
        for _ in 0..warmup {
            self.round_trip()?;
        }
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let started = Instant::now();
            self.round_trip()?;
            samples.push(started.elapsed());
        }
        Ok(samples)
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
