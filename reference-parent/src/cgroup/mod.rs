//! Per-child cgroup v2 containment (DESIGN §17.2): find a writable cgroup v2
//! hierarchy, keep one parent cgroup for this process, and create, fill,
//! kill and remove one child cgroup per worker and per host command.
//!
//! This module chooses the containment mode ([`Containment`]) and reports
//! what is in effect ([`ContainmentReport`]); its submodules do the work,
//! one job each: `hierarchy` (the v2 mount, the parent's own cgroup, stale
//! cgroups, controllers, removal at exit) and `child` (one child's cgroup
//! from creation to removal).
//!
//! # Layout
//!
//! The cgroup v2 mount is found in `/proc/self/mountinfo` (it need not be at
//! `/sys/fs/cgroup`: a hybrid layout mounts it beside the v1 controllers,
//! e.g. at `/sys/fs/cgroup/unified`), this process's cgroup in
//! `/proc/self/cgroup` (the `0::` line). Under that cgroup the parent creates
//! its own cgroup `quirl-lua-<pid>-<start time>` and, inside it, one cgroup
//! per child: `worker-<n>` or `command-<n>`. The parent itself never moves:
//! its own cgroup holds no process, only child cgroups, so the "no internal
//! processes" rule of cgroup v2 allows controllers to be enabled in it.
//!
//! # Controllers
//!
//! `memory` and `pids` are used when the hierarchy has them: they are
//! enabled in the `cgroup.subtree_control` of this process's cgroup (which
//! the kernel refuses with `EBUSY` for a non-root cgroup that holds
//! processes) and of the parent's own cgroup. Whatever cannot be enabled is
//! recorded as a note and the limit is not set; containment and the kill do
//! not need any controller (`cgroup.kill`, `cgroup.procs`, `cgroup.events`
//! and `cgroup.freeze` are core files).
//!
//! # Placement before any code runs
//!
//! The child joins its cgroup from the spawn's pre-exec step by writing `0`
//! to `cgroup.procs` through a descriptor opened (close-on-exec) before the
//! fork. `clone3(CLONE_INTO_CGROUP)` was not chosen: `std::process::Command`
//! cannot pass it, and re-implementing the spawn (pipes, exec-error report,
//! signal mask) around a raw `clone3` is far more unsafe code than one
//! `write(2)`, which is async-signal-safe and allocates nothing. The program
//! image runs only after `exec`, which follows the write, so nothing of the
//! program ever runs outside the cgroup; a failed write fails the spawn.
//!
//! # Ending a child cgroup
//!
//! `cgroup.kill` (Linux ≥ 5.14) SIGKILLs every member, including processes
//! forked while the kill runs. Older kernels: `cgroup.freeze`, then SIGKILL
//! to every pid in `cgroup.procs`, in rounds until it is empty (a frozen
//! member cannot fork, and a pid listed there stays allocated until the
//! member is killed). Then the parent waits until `cgroup.events` says
//! `populated 0`: the file raises `POLLPRI` on every change, so the wait is
//! one `ppoll` per change, never a sleep tick, bounded by
//! `EMPTY_WAIT_MAX` (the `child` module). Only then is the directory removed.
//!
//! # Nothing left behind
//!
//! Every child cgroup is owned by a value that removes it on drop. The
//! parent's own cgroup is removed by an `atexit` handler at normal exit
//! (killing whatever is still in it). A parent that crashed leaves its
//! cgroup behind; the next parent that starts under the same cgroup removes
//! every `quirl-lua-<pid>-<start>` directory whose creator is gone (no
//! process `<pid>`, or one with another start time — so a reused pid is not
//! mistaken for the creator).
//!
//! # Process limits without a v2 `pids` controller
//!
//! A hybrid layout often binds `pids` to a cgroup v1 hierarchy. A host
//! command's process limit (`--command-pids-max`) is then set in a v1
//! `pids` cgroup of its own (`pids_v1`); where neither is writable, a
//! command with a limit is refused, never run without it
//! ([`command_pids_enforcement`]).
//!
//! What this module is not: a sandbox against root. A process running as
//! root that can write to the cgroup filesystem can move itself out of its
//! cgroup; host commands cannot (their Landlock domain makes the cgroup
//! filesystem read-only to them and they hold no capability, DESIGN
//! §16.7), and their PID namespace kills them wherever they are.

mod child;
mod hierarchy;
mod pids_v1;

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

pub(crate) use child::{CgroupLimits, ChildCgroup, ChildKind, enter_in_child};
pub(crate) use hierarchy::Hierarchy;
use hierarchy::hierarchy;
pub(crate) use pids_v1::{PidsCgroup, PidsHierarchy, pids_v1};

/// Which containment a parent uses for its children (DESIGN §17.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Containment {
    /// A cgroup per child when a writable cgroup v2 hierarchy is available,
    /// process groups otherwise.
    #[default]
    Auto,
    /// A cgroup per child; spawning fails when cgroup v2 is not writable.
    Cgroup,
    /// Process groups and sessions only (the containment of DESIGN §17.3).
    ProcessGroup,
}

impl Containment {
    /// The containment a spawned child is in: `Cgroup` when it runs in a
    /// cgroup of its own, otherwise `ProcessGroup` (never `Auto`).
    pub const fn in_effect(cgroup_contained: bool) -> Self {
        if cgroup_contained {
            Self::Cgroup
        } else {
            Self::ProcessGroup
        }
    }

    /// `auto`, `cgroup` or `process-group`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Cgroup => "cgroup",
            Self::ProcessGroup => "process-group",
        }
    }
}

impl fmt::Display for Containment {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

impl FromStr for Containment {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(Self::Auto),
            "cgroup" => Ok(Self::Cgroup),
            "process-group" => Ok(Self::ProcessGroup),
            other => Err(format!(
                "unknown containment `{other}` (use auto, cgroup or process-group)"
            )),
        }
    }
}

/// Which containment is in effect and why, for diagnostics (`stats`,
/// `--json` error contexts, `quirl-lua --version --verbose`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ContainmentReport {
    /// `cgroup` or `process-group`.
    pub mode: &'static str,
    /// What was asked for: `auto`, `cgroup` or `process-group`.
    pub requested: &'static str,
    /// The parent's own cgroup directory, in cgroup mode.
    pub cgroup: Option<String>,
    /// Controllers enabled for child cgroups (`memory`, `pids`).
    pub controllers: Vec<&'static str>,
    /// Why a controller or cgroup mode is not in use.
    pub notes: Vec<String>,
    /// Whether host commands run under the Landlock execute ruleset
    /// (DESIGN §16.6), and if not, why.
    pub landlock: crate::process_host::LandlockSupport,
    /// What the worker's own lockdown does on this system after
    /// `initialize` (DESIGN §18.3), when the program reporting knows its
    /// worker: the supervisor supervises any worker and leaves this `None`;
    /// the `quirl-lua` CLI fills in the reference worker's lockdown
    /// (seccomp and its Landlock domain) for its built-in worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_lockdown: Option<String>,
    /// Whether a host command granted by name executes exactly one program
    /// (the exec guard, DESIGN §16.6), and if not, why.
    pub exec_guard: String,
    /// What a host command may write and whom it may signal (its Landlock
    /// domain, DESIGN §16.6–§16.7).
    pub command_writes: String,
    /// Whether each host command is the init of a PID namespace of its own
    /// (DESIGN §16.7), and if not, why.
    pub pid_namespace: String,
    /// How a host command's process limit is enforced, or why commands
    /// with one are refused (DESIGN §16.7).
    pub command_pids_limit: String,
}

impl ContainmentReport {
    /// One line, e.g. `cgroup v2 (/sys/fs/cgroup/…; controllers: pids)`.
    pub fn summary(&self) -> String {
        let notes = if self.notes.is_empty() {
            String::new()
        } else {
            format!("; {}", self.notes.join("; "))
        };
        match &self.cgroup {
            Some(path) => {
                let controllers = if self.controllers.is_empty() {
                    "none".to_owned()
                } else {
                    self.controllers.join(", ")
                };
                format!("cgroup v2 ({path}; controllers: {controllers}{notes})")
            }
            None => format!("process-group (requested {}{notes})", self.requested),
        }
    }
}

/// What `choice` resolves to in this process, and why.
pub fn containment_report(choice: Containment) -> ContainmentReport {
    let mut report = ContainmentReport {
        mode: "process-group",
        requested: choice.as_str(),
        cgroup: None,
        controllers: Vec::new(),
        notes: Vec::new(),
        landlock: crate::process_host::landlock_support().clone(),
        worker_lockdown: None,
        exec_guard: crate::process_host::exec_guard_summary(),
        command_writes: crate::process_host::write_confinement_summary(),
        pid_namespace: crate::process_host::pid_namespace_summary(),
        command_pids_limit: String::new(),
    };
    let cgroup_hierarchy = match choice {
        Containment::ProcessGroup => None,
        _ => hierarchy().ok(),
    };
    report.command_pids_limit = command_pids_enforcement(cgroup_hierarchy).summary();
    if choice == Containment::ProcessGroup {
        report
            .notes
            .push("process-group containment was forced".to_owned());
        return report;
    }
    match hierarchy() {
        Ok(found) => {
            report.mode = "cgroup";
            report.cgroup = Some(found.own().display().to_string());
            if found.memory() {
                report.controllers.push("memory");
            }
            if found.pids() {
                report.controllers.push("pids");
            }
            report.notes.extend(found.notes().iter().cloned());
        }
        Err(why) => report
            .notes
            .push(format!("cgroup v2 is not available: {why}")),
    }
    report
}

/// How a host command's process limit is enforced (DESIGN §16.7).
#[derive(Debug)]
pub(crate) enum PidsEnforcement {
    /// `pids.max` of the command's cgroup v2.
    CgroupV2,
    /// `pids.max` of a cgroup of its own in the v1 `pids` hierarchy.
    CgroupV1(&'static PidsHierarchy),
    /// `RLIMIT_NPROC` of the command's user namespace (an unprivileged
    /// parent: the count is the command's own processes there).
    UserNamespace,
    /// Neither: a command with a limit is refused.
    Unavailable(String),
}

impl PidsEnforcement {
    /// One line for reports and error contexts.
    pub(crate) fn summary(&self) -> String {
        match self {
            Self::CgroupV2 => "pids.max of the command's cgroup v2".to_owned(),
            Self::CgroupV1(found) => format!(
                "pids.max of a cgroup v1 of its own (under {}; cgroup v2 has no pids controller here)",
                found.own().display()
            ),
            Self::UserNamespace => "RLIMIT_NPROC in the command's own user namespace (no writable pids controller here)".to_owned(),
            Self::Unavailable(why) => format!(
                "unavailable ({why}): a host command with a process limit is refused; --command-pids-max max runs commands without one"
            ),
        }
    }
}

/// How a command's process limit is enforced with the command's cgroup v2
/// in `cgroup_hierarchy` (`None`: process-group mode).
pub(crate) fn command_pids_enforcement(cgroup_hierarchy: Option<&Hierarchy>) -> PidsEnforcement {
    if cgroup_hierarchy.is_some_and(Hierarchy::pids) {
        return PidsEnforcement::CgroupV2;
    }
    match pids_v1() {
        Ok(found) => PidsEnforcement::CgroupV1(found),
        Err(_) if crate::process_host::user_namespace_in_effect() => PidsEnforcement::UserNamespace,
        Err(why) => {
            let v2 = match cgroup_hierarchy {
                Some(_) => "cgroup v2 has no pids controller here".to_owned(),
                None => "no cgroup v2 for the command".to_owned(),
            };
            PidsEnforcement::Unavailable(format!("{v2}; {why}"))
        }
    }
}

/// The hierarchy for `choice`: `Ok(None)` means process groups.
///
/// `Cgroup` fails with the reason when no writable cgroup v2 hierarchy is
/// available; `Auto` falls back to `None`.
pub(crate) fn resolve(choice: Containment) -> Result<Option<&'static Hierarchy>, String> {
    match choice {
        Containment::ProcessGroup => Ok(None),
        Containment::Auto => Ok(hierarchy().ok()),
        Containment::Cgroup => hierarchy()
            .map(Some)
            .map_err(|why| format!("cgroup containment was requested but {why}")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn containment_names_round_trip() {
        for choice in [
            Containment::Auto,
            Containment::Cgroup,
            Containment::ProcessGroup,
        ] {
            assert_eq!(choice.as_str().parse::<Containment>(), Ok(choice));
        }
        assert!("cgroups".parse::<Containment>().is_err());
    }

    #[test]
    fn forced_process_group_mode_says_so() {
        let report = containment_report(Containment::ProcessGroup);
        assert_eq!(report.mode, "process-group");
        assert!(report.summary().contains("forced"), "{}", report.summary());
    }
}
