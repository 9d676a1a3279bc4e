#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod process;

use quirl_lua_protocol::records::{Operation, Policy, PolicySettings};
use quirl_lua_reference_worker::sandbox::sdk::{HostPort, HostReply, HostRequest};
use quirl_lua_reference_worker::{OpError, Verdict, Vm, VmConfig};
use serde_json::{Value, json};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// The budgets of a test VM, with struct-update syntax (`..POLICY`); the
/// protocol's [`Policy`] is built from them in one place ([`Budgets::policy`]).
#[derive(Debug, Clone, Copy)]
pub struct Budgets {
    pub allow_process: bool,
    pub memory_limit_bytes: u64,
    pub instruction_limit: u64,
    pub wall_time_ms: u64,
}

impl Budgets {
    /// The protocol's policy with these budgets (they must be in range).
    pub fn policy(self) -> Policy {
        Policy::new(PolicySettings {
            allow_process: self.allow_process,
            memory_limit_bytes: self.memory_limit_bytes,
            instruction_limit: self.instruction_limit,
            wall_time_ms: self.wall_time_ms,
        })
        .expect("test budgets lie within the policy ranges")
    }
}

pub const POLICY: Budgets = Budgets {
    allow_process: false,
    memory_limit_bytes: 16 * 1024 * 1024,
    instruction_limit: 1_000_000,
    wall_time_ms: 5_000,
};

pub fn vm_with(budgets: Budgets) -> Vm {
    Vm::new(
        &VmConfig {
            policy: budgets.policy(),
            grants: None,
            process_enabled: false,
        },
        Arc::new(AtomicBool::new(false)),
        None,
    )
    .unwrap()
}

pub fn vm() -> Vm {
    vm_with(POLICY)
}

pub fn eval(vm: &mut Vm, source: &str) -> Verdict {
    vm.handle(Operation::Eval {
        source: source.to_owned(),
    })
}

#[track_caller]
pub fn success(verdict: Verdict) -> Value {
    match verdict {
        Verdict::Success(value) => value,
        other => panic!("expected success, got {other:?}"),
    }
}

#[track_caller]
pub fn failure(verdict: Verdict) -> OpError {
    match verdict {
        Verdict::Failure(error) => error,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[track_caller]
pub fn retired(verdict: Verdict) -> OpError {
    match verdict {
        Verdict::Retired(error) => error,
        other => panic!("expected a limit trip, got {other:?}"),
    }
}

/// The limit named in a retired verdict's context (`limit: <name>`).
#[track_caller]
pub fn tripped(verdict: Verdict) -> String {
    let error = retired(verdict);
    assert_eq!(
        error.code,
        quirl_lua_reference_worker::ErrorCode::ResourceLimit
    );
    error
        .context
        .iter()
        .find_map(|c| c.strip_prefix("limit: ").map(str::to_owned))
        .unwrap_or_else(|| panic!("no limit named in {error:?}"))
}

pub fn context() -> Value {
    json!({
        "arguments": ["one", "two"],
        "environment": {"HOME": "/home/q"},
        "working_directory": "/work",
        "input": {"kind": "none"},
        "output": {"kind": "value"},
        "declared_effects": {"read_filesystem": true, "write_filesystem": false,
                             "spawn_process": false, "change_directory": false}
    })
}

/// A host port that records requests and answers from a script.
#[derive(Clone, Default)]
pub struct FakeHost {
    pub requests: Arc<Mutex<Vec<HostRequest>>>,
    pub replies: Arc<Mutex<Vec<HostReply>>>,
}

impl HostPort for FakeHost {
    fn call(&mut self, request: HostRequest) -> HostReply {
        self.requests.lock().unwrap().push(request);
        let mut replies = self.replies.lock().unwrap();
        if replies.is_empty() {
            HostReply::Violation("no scripted reply".to_owned())
        } else {
            replies.remove(0)
        }
    }
}

pub fn process_vm(host: FakeHost, grants: Option<Vec<String>>) -> Vm {
    Vm::new(
        &VmConfig {
            policy: Budgets {
                allow_process: true,
                ..POLICY
            }
            .policy(),
            grants,
            process_enabled: true,
        },
        Arc::new(AtomicBool::new(false)),
        Some(Box::new(host)),
    )
    .unwrap()
}
