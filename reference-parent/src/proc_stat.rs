//! Reading `/proc/PID/stat`: the one parser of the fields the parent uses
//! (state, parent pid, session id, start time) for the process-tree sweep
//! (SPEC §16.7) and for telling a cgroup's creator from a reused pid
//! (SPEC §17.2).

/// State, parent, session and start time of one process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProcStat {
    pub(crate) ppid: libc::pid_t,
    pub(crate) session: libc::pid_t,
    pub(crate) start_time: u64,
    pub(crate) alive: bool,
    /// Neither running nor in uninterruptible wait (`R`, `D`, `W`): the
    /// process is blocked, stopped or gone, so it is not between two of its
    /// own system calls (SPEC §16.6: the escape verdict waits for this).
    pub(crate) settled: bool,
}

/// The fields of `/proc/PID/stat` the parent uses; `None` when the
/// process does not exist (any more).
pub(crate) fn read_stat(pid: libc::pid_t) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is parenthesised and may contain anything, so the
    // fields are counted from the last `)`.
    let rest = text.get(text.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // fields[0] = state (3), [1] = ppid (4), [3] = session (6), [19] = starttime (22)
    let state = fields.first()?;
    Some(ProcStat {
        ppid: fields.get(1)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
        alive: !matches!(*state, "Z" | "X" | "x"),
        settled: !matches!(*state, "R" | "D" | "W"),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use rustix::process::Pid;

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
