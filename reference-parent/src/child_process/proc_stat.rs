//! Reading `/proc/PID/stat`: the one parser of the fields the parent uses
//! (state, parent pid, session id, start time) for the process-tree sweep
//! (DESIGN §16.7) and for telling a cgroup's creator from a reused pid
//! (DESIGN §17.2).

/// State, parent, session and start time of one process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProcStat {
    pub(crate) ppid: libc::pid_t,
    pub(crate) session: libc::pid_t,
    pub(crate) start_time: u64,
    pub(crate) alive: bool,
    /// Neither running nor in uninterruptible wait (`R`, `D`, `W`): the
    /// process is blocked, stopped or gone, so it is not between two of its
    /// own system calls (DESIGN §16.6: the escape verdict waits for this).
    pub(crate) settled: bool,
}

/// Longest `/proc/PID/stat` line read: 52 fields of at most 20 digits and
/// a command name of at most 64 bytes fit well within it.
const STAT_LINE_MAX: usize = 2048;

/// The fields of `/proc/PID/stat` the parent uses; `None` when the
/// process does not exist (any more).
///
/// A sweep reads this for every process of the system, so the read is one
/// `open`, one or two `read`s into a stack buffer and a `close` (no size
/// query, no allocation).
pub(crate) fn read_stat(pid: libc::pid_t) -> Option<ProcStat> {
    use std::io::Read;
    let mut path = [0u8; 32];
    let path = stat_path(pid, &mut path)?;
    let mut file = std::fs::File::open(path).ok()?;
    let mut line = [0u8; STAT_LINE_MAX];
    let mut length = 0;
    while length < line.len() {
        match file.read(&mut line[length..]) {
            Ok(0) => break,
            Ok(read) => length += read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    parse_stat(line.get(..length)?)
}

/// `/proc/PID/stat` written into `buffer`.
fn stat_path(pid: libc::pid_t, buffer: &mut [u8; 32]) -> Option<&std::path::Path> {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    let mut cursor = std::io::Cursor::new(&mut buffer[..]);
    write!(cursor, "/proc/{pid}/stat").ok()?;
    let length = usize::try_from(cursor.position()).ok()?;
    Some(std::path::Path::new(std::ffi::OsStr::from_bytes(
        buffer.get(..length)?,
    )))
}

/// The fields of one stat line.
fn parse_stat(line: &[u8]) -> Option<ProcStat> {
    // The command name is parenthesised and may contain anything, so the
    // fields are counted from the last `)`.
    let close = line.iter().rposition(|&byte| byte == b')')?;
    let rest = std::str::from_utf8(line.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    // fields 0 = state (3), 1 = ppid (4), 3 = session (6), 19 = starttime (22)
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let session = fields.nth(1)?.parse().ok()?;
    let start_time = fields.nth(15)?.parse().ok()?;
    Some(ProcStat {
        ppid,
        session,
        start_time,
        alive: !matches!(state, "Z" | "X" | "x"),
        settled: !matches!(state, "R" | "D" | "W"),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use rustix::process::Pid;

    #[test]
    fn parses_fields_after_the_last_parenthesis() {
        // A command name with spaces and parentheses, as a process may
        // choose (`prctl(PR_SET_NAME)`).
        let line = b"4242 (a) b (c)) S 17 4242 4200 0 -1 4194560 98 0 0 0 1 2 0 0 20 0 1 0 987654 1 2 3 4\n";
        let stat = parse_stat(line).unwrap();
        assert_eq!(stat.ppid, 17);
        assert_eq!(stat.session, 4200);
        assert_eq!(stat.start_time, 987_654);
        assert!(stat.alive && stat.settled);
        let zombie = b"7 (x) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55\n";
        assert!(!parse_stat(zombie).unwrap().alive);
        let running = b"7 (x) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55\n";
        assert!(!parse_stat(running).unwrap().settled);
        // Truncated before the start time, or no name at all: refused.
        assert!(parse_stat(b"7 (x) S 1 7 7 0 -1 0 0").is_none());
        assert!(parse_stat(b"7 x S 1 7 7").is_none());
    }

    #[test]
    fn a_process_that_does_not_exist_has_no_stat() {
        assert!(read_stat(libc::pid_t::MAX).is_none());
        assert!(read_stat(-1).is_none());
    }

    #[test]
    fn reads_its_own_stat_line() {
        let pid = libc::pid_t::try_from(std::process::id()).unwrap();
        let stat = read_stat(pid).unwrap();
        assert!(stat.alive);
        let parent = rustix::process::getppid().map_or(0, Pid::as_raw_pid);
        assert_eq!(stat.ppid, parent);
        // The session id is checked against /proc/self/status (the innermost
        // value of `NSsid`), not getsid: in a PID namespace whose session
        // leader lives outside it the id is 0, which rustix's `Pid` rejects.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let nssid = status
            .lines()
            .find_map(|line| line.strip_prefix("NSsid:"))
            .and_then(|ids| ids.split_ascii_whitespace().last())
            .map(|id| id.parse::<libc::pid_t>().unwrap());
        match nssid {
            Some(session) => assert_eq!(stat.session, session),
            None => eprintln!(
                "no NSsid line in /proc/self/status (kernel before 4.1): session id not cross-checked"
            ),
        }
    }
}
