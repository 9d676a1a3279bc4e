//! Lockdown of the worker (DESIGN §18.3): the binary locks itself down after
//! `initialize` (and not before, and not with `--no-lockdown`), reports its
//! capability, and the installed filter kills exactly what it should — the
//! last checked by the kernel itself in forked children.
#![cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::LUA_WORKER_PROTOCOL_DESCRIPTOR;
use quirl_lua_reference_worker::lockdown::FRAME_FD;
use quirl_lua_reference_worker::lockdown::filter::Filter;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};

const WORKER: &str = env!("CARGO_BIN_EXE_quirl-worker");

fn frame(value: &Value) -> Vec<u8> {
    let payload = serde_json::to_vec(value).unwrap();
    let mut out = u32::try_from(payload.len()).unwrap().to_be_bytes().to_vec();
    out.extend(payload);
    out
}

fn request(id: u64, operation: Value) -> Vec<u8> {
    frame(&json!({"kind": "request", "request": {"version": 1, "id": id, "operation": operation}}))
}

fn initialize() -> Vec<u8> {
    request(
        1,
        json!({"operation": "initialize", "protocol_descriptor": LUA_WORKER_PROTOCOL_DESCRIPTOR,
        "policy": {"allow_process": false, "memory_limit_bytes": 8_388_608,
                   "instruction_limit": 2_000_000, "wall_time_ms": 2_000},
        "grants": null, "process_enabled": false}),
    )
}

fn read_frame(child: &mut Child) -> Value {
    let output = child.stderr.as_mut().unwrap();
    let mut header = [0u8; 4];
    output.read_exact(&mut header).unwrap();
    let mut payload = vec![0u8; u32::from_be_bytes(header) as usize];
    output.read_exact(&mut payload).unwrap();
    serde_json::from_slice(&payload).unwrap()
}

fn send(child: &mut Child, bytes: &[u8]) {
    let input = child.stdin.as_mut().unwrap();
    input.write_all(bytes).unwrap();
    input.flush().unwrap();
}

fn spawn(args: &[&str]) -> Child {
    Command::new(WORKER)
        .arg("--internal-lua-worker-v1")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn status_field(pid: u32, name: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(|value| value.trim().to_owned())
        .unwrap()
}

/// Close the input and reap; the exit code.
fn finish(mut child: Child) -> Option<i32> {
    drop(child.stdin.take());
    child.wait().unwrap().code()
}

// SPEC §4.3-f: each request is answered while the input stays open: the worker reads no byte
// beyond the declared length before it acts.
#[test]
fn worker_locks_down_after_initialize_and_still_serves() {
    // DESIGN §18.3-a: locked down before answering `initialize`.
    let mut child = spawn(&[]);
    let pid = child.id();
    send(&mut child, &initialize());
    assert_eq!(read_frame(&mut child)["response"]["ok"], json!(true));
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    assert_eq!(status_field(pid, "Seccomp"), "2");
    assert_eq!(status_field(pid, "Seccomp_filters"), "1");
    send(
        &mut child,
        &request(2, json!({"operation": "eval", "source": "return 6 * 7"})),
    );
    assert_eq!(read_frame(&mut child)["response"]["result"], json!(42));
    // End of input at a frame boundary: a clean exit under the filter.
    assert_eq!(finish(child), Some(0));
}

#[test]
fn worker_is_not_locked_down_before_initialize() {
    let mut child = spawn(&[]);
    let pid = child.id();
    // Wait until the worker has arranged its descriptors (fd 3 exists), so
    // the status read is of the worker, not of the exec in progress.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::fs::read_link(format!("/proc/{pid}/fd/{FRAME_FD}")).is_err() {
        assert!(std::time::Instant::now() < deadline, "fd 3 never appeared");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(status_field(pid, "Seccomp"), "0");
    send(&mut child, &initialize());
    assert_eq!(read_frame(&mut child)["response"]["ok"], json!(true));
    assert_eq!(status_field(pid, "Seccomp"), "2");
    assert_eq!(finish(child), Some(0));
}

#[test]
fn no_lockdown_argument_leaves_the_worker_unfiltered() {
    let mut child = spawn(&["--no-lockdown"]);
    let pid = child.id();
    send(&mut child, &initialize());
    assert_eq!(read_frame(&mut child)["response"]["ok"], json!(true));
    assert_eq!(status_field(pid, "Seccomp"), "0");
    assert_eq!(finish(child), Some(0));
}

#[test]
fn a_failed_initialize_answers_before_any_lockdown() {
    let mut child = spawn(&[]);
    // A memory limit below what the sandbox itself needs: initialize fails.
    let bad = request(
        1,
        json!({"operation": "initialize", "protocol_descriptor": LUA_WORKER_PROTOCOL_DESCRIPTOR,
        "policy": {"allow_process": false, "memory_limit_bytes": 1024,
                   "instruction_limit": 1_000, "wall_time_ms": 100},
        "grants": null, "process_enabled": false}),
    );
    send(&mut child, &bad);
    let answer = read_frame(&mut child);
    assert_eq!(answer["response"]["ok"], json!(false), "{answer}");
    assert_eq!(finish(child), Some(0));
}

#[test]
fn lockdown_report_lists_the_allowlist() {
    let output = Command::new(WORKER)
        .arg("--lockdown-report")
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("lockdown: available"), "{text}");
    for name in ["read", "write", "mmap", "exit_group", "tgkill"] {
        assert!(text.contains(&format!("  {name} ")), "{name}: {text}");
    }
    #[cfg(target_arch = "x86_64")]
    assert!(text.contains("AUDIT_ARCH_X86_64"), "{text}");
}

/// Install the filter in a forked child, run `body` there, and return how
/// the child ended: `Ok(exit code)` or `Err(signal)`.
///
/// The child of this multi-threaded test process makes only raw system
/// calls (the filter is built before the fork) and leaves with `_exit`.
fn in_locked_child(body: fn()) -> Result<i32, i32> {
    let filter = Filter::build(std::process::id()).unwrap();
    // SAFETY: fork; the child below only makes async-signal-safe calls.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        if filter.install().is_err() {
            // SAFETY: _exit is async-signal-safe.
            unsafe { libc::_exit(90) };
        }
        body();
        // SAFETY: as above.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waitpid on our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
    if libc::WIFSIGNALED(status) {
        Err(libc::WTERMSIG(status))
    } else {
        Ok(libc::WEXITSTATUS(status))
    }
}

// SAFETY (probe bodies below): each makes raw system calls on literals,
// null pointers or locals of the forked child, which exits right after.

#[test]
fn the_filter_allows_what_the_serve_loop_needs() {
    let ended = in_locked_child(|| unsafe {
        let mut byte = 0u8;
        // Reads of zero bytes and writes of zero bytes touch nothing.
        libc::read(0, (&raw mut byte).cast(), 0);
        libc::write(2, (&raw const byte).cast(), 0);
        let at = libc::mmap(
            std::ptr::null_mut(),
            1 << 20,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if at == libc::MAP_FAILED {
            libc::_exit(91);
        }
        let grown = libc::mremap(at, 1 << 20, 2 << 20, libc::MREMAP_MAYMOVE);
        if grown == libc::MAP_FAILED {
            libc::_exit(92);
        }
        libc::madvise(grown, 1 << 20, libc::MADV_DONTNEED);
        libc::munmap(grown, 2 << 20);
        libc::syscall(libc::SYS_brk, 0_usize);
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, &raw mut now);
        libc::syscall(libc::SYS_getpid);
        libc::syscall(libc::SYS_gettid);
        libc::syscall(libc::SYS_exit_group, 7);
    });
    assert_eq!(ended, Ok(7));
}

fn assert_killed(what: &str, body: fn()) {
    assert_eq!(in_locked_child(body), Err(libc::SIGSYS), "{what}");
}

#[test]
fn the_filter_kills_process_creation_and_execution() {
    assert_killed("execve", || unsafe {
        let argv = [c"/bin/true".as_ptr(), std::ptr::null()];
        libc::execve(c"/bin/true".as_ptr(), argv.as_ptr(), std::ptr::null());
    });
    assert_killed("clone", || unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD,
            0_usize,
            0_usize,
            0_usize,
            0_usize,
        );
    });
    assert_killed("clone3", || unsafe {
        libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0_usize);
    });
    #[cfg(target_arch = "x86_64")]
    assert_killed("fork", || unsafe {
        libc::syscall(libc::SYS_fork);
    });
    #[cfg(target_arch = "x86_64")]
    assert_killed("vfork", || unsafe {
        libc::syscall(libc::SYS_vfork);
    });
}

#[test]
fn the_filter_kills_files_sockets_and_ioctls() {
    assert_killed("openat", || unsafe {
        libc::openat(libc::AT_FDCWD, c"/etc/passwd".as_ptr(), libc::O_RDONLY);
    });
    #[cfg(target_arch = "x86_64")]
    assert_killed("open", || unsafe {
        libc::syscall(libc::SYS_open, c"/etc/passwd".as_ptr(), libc::O_RDONLY);
    });
    assert_killed("socket", || unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
    });
    assert_killed("ioctl", || unsafe {
        libc::ioctl(0, libc::TIOCSTI, c"x".as_ptr());
    });
    assert_killed("close", || unsafe {
        libc::close(0);
    });
    assert_killed("read from another descriptor", || unsafe {
        let mut byte = 0u8;
        libc::read(FRAME_FD + 1, (&raw mut byte).cast(), 0);
    });
    assert_killed("write to stdout", || unsafe {
        libc::write(1, c"x".as_ptr().cast(), 0);
    });
}

#[test]
fn the_filter_kills_executable_memory_and_privilege_changes() {
    assert_killed("mmap PROT_EXEC", || unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
    });
    assert_killed("mmap of a file", || unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            0,
            0,
        );
    });
    assert_killed("mmap shared", || unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
    });
    assert_killed("mprotect", || unsafe {
        libc::mprotect(std::ptr::null_mut(), 0, libc::PROT_READ);
    });
    assert_killed("mremap MREMAP_FIXED", || unsafe {
        libc::syscall(
            libc::SYS_mremap,
            0_usize,
            4096_usize,
            4096_usize,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            0_usize,
        );
    });
    assert_killed("prctl", || unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
    });
    assert_killed("ptrace", || unsafe {
        libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
    });
    assert_killed("kill", || unsafe {
        libc::kill(1, 0);
    });
    assert_killed("tgkill with SIGKILL", || unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid(),
            libc::getpid(),
            libc::SIGKILL,
        );
    });
    assert_killed("setrlimit", || unsafe {
        let limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &raw const limit);
    });
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_filter_kills_x32_and_i386_entry_points() {
    // x32 `getpid` (39 | __X32_SYSCALL_BIT): getpid itself is allowed.
    assert_killed("x32 getpid", || unsafe {
        libc::syscall(0x4000_0000 | libc::SYS_getpid);
    });
    // i386 `getpid` (20) through int 0x80: AUDIT_ARCH_I386, killed by the
    // architecture check (a kernel without IA32 emulation refuses the entry
    // itself with SIGSEGV before seccomp runs).
    let ended = in_locked_child(|| unsafe {
        std::arch::asm!("int 0x80", inlateout("eax") 20 => _, options(nostack));
    });
    assert!(
        ended == Err(libc::SIGSYS) || ended == Err(libc::SIGSEGV),
        "{ended:?}"
    );
}

/// DESIGN §18.3 step 4: after `initialize` the worker's Landlock domain
/// refuses every file, independently of the seccomp filter (the
/// `landlock-open` probe skips the filter and reports the open's outcome
/// as its exit status); before `initialize`, and with `--no-lockdown`,
/// files open.
#[cfg(debug_assertions)]
#[test]
fn the_landlock_domain_refuses_every_file_after_initialize() {
    // DESIGN §18.3-a: the Landlock domain is in force after `initialize`.
    use quirl_lua_reference_worker::lockdown::probe::{LANDLOCK_DENIED_EXIT, LANDLOCK_OPENED_EXIT};
    let abi = quirl_lua_reference_worker::lockdown::landlock::kernel_abi();
    for (args, expected) in [
        (
            &["--lockdown-test-probe=landlock-open"][..],
            LANDLOCK_DENIED_EXIT,
        ),
        (
            &["--no-lockdown", "--lockdown-test-probe=landlock-open"][..],
            LANDLOCK_OPENED_EXIT,
        ),
    ] {
        let mut child = spawn(args);
        send(&mut child, &initialize());
        assert_eq!(read_frame(&mut child)["response"]["ok"], json!(true));
        let pid = child.id();
        if expected == LANDLOCK_DENIED_EXIT {
            // The probe skipped the filter; no-new-privileges is set.
            assert_eq!(status_field(pid, "Seccomp"), "0");
            assert_eq!(status_field(pid, "NoNewPrivs"), "1");
        }
        send(
            &mut child,
            &request(2, json!({"operation": "eval", "source": "return 1"})),
        );
        let code = finish(child);
        if abi.is_err() && expected == LANDLOCK_DENIED_EXIT {
            quirl_lua_testkit::environment::skip(
                "landlock",
                "the locked-down half",
                &format!("{abi:?}"),
            );
            assert_eq!(code, Some(LANDLOCK_OPENED_EXIT));
            continue;
        }
        assert_eq!(code, Some(expected), "{args:?}");
    }
}

#[test]
fn lockdown_report_names_the_landlock_domain() {
    let output = Command::new(WORKER)
        .arg("--lockdown-report")
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let expected = match quirl_lua_reference_worker::lockdown::landlock::kernel_abi() {
        Ok(abi) => format!(
            "landlock: available (ABI {abi}): after initialize, a Landlock domain with no filesystem access"
        ),
        Err(_) => "landlock: unavailable".to_owned(),
    };
    assert!(text.contains(&expected), "{text}");
}
