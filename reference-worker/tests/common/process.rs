//! VMs with the sandbox's capabilities, `run` requests with a chosen input,
//! environment and output target, and stock Lua 5.4.9 run as a process
//! with a standard input (for `tests/lua_os.rs` and `tests/lua_io.rs`).
#![allow(dead_code)]

use super::Budgets;
use quirl_lua_protocol::records::{
    ExecutionContext, ExecutionEffects, ExecutionInput, ExecutionOutcome, ExecutionOutput,
    ExecutionStatus, Operation, OperationKind, OperationResult, OutputTarget,
};
use quirl_lua_reference_worker::{Verdict, Vm, VmConfig};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// A VM granted exactly `grants`.
pub fn vm_granting(budgets: Budgets, grants: &[&str]) -> Vm {
    Vm::new(
        &VmConfig {
            policy: budgets.policy(),
            grants: Some(grants.iter().map(|g| (*g).to_owned()).collect()),
            process_enabled: false,
        },
        Arc::new(AtomicBool::new(false)),
        None,
    )
    .unwrap()
}

/// What a `run` hands the script.
#[derive(Debug, Clone, Default)]
pub struct RunInput {
    /// `ctx.input` as bytes (the script's stdin), or none.
    pub stdin: Option<Vec<u8>>,
    /// `ctx.env` (what `os.getenv` finds).
    pub environment: BTreeMap<String, String>,
    /// `capture` output with this bound, else `value` output.
    pub capture: Option<u64>,
}

/// The execution context of `input`.
pub fn context(input: &RunInput) -> ExecutionContext {
    ExecutionContext {
        arguments: Vec::new(),
        environment: input.environment.clone(),
        working_directory: "/work".to_owned(),
        input: match &input.stdin {
            Some(bytes) => ExecutionInput::Bytes(bytes.clone()),
            None => ExecutionInput::None,
        },
        output: match input.capture {
            Some(bound) => OutputTarget::Capture {
                max_bytes_per_stream: bound,
            },
            None => OutputTarget::Value,
        },
        declared_effects: ExecutionEffects::default(),
    }
}

/// Run `source` under the runner ABI.
pub fn run(vm: &mut Vm, source: &str, input: &RunInput) -> Verdict {
    vm.handle(Operation::Run {
        source: source.to_owned(),
        source_name: "script.lua".to_owned(),
        context: context(input),
    })
}

/// The outcome of a successful run, decoded as the parent decodes it.
#[track_caller]
pub fn outcome(verdict: Verdict) -> ExecutionOutcome {
    match verdict {
        Verdict::Success(value) => match OperationResult::decode(OperationKind::Run, &value) {
            Ok(OperationResult::Outcome(outcome)) => outcome,
            other => panic!("not an execution outcome: {other:?} from {value}"),
        },
        other => panic!("expected an outcome, got {other:?}"),
    }
}

/// The status, stdout and stderr of a run with captured output.
#[track_caller]
pub fn captured(verdict: Verdict) -> (i32, String, String) {
    let outcome = outcome(verdict);
    let ExecutionStatus::Exited(status) = outcome.status;
    match outcome.output {
        ExecutionOutput::Bytes { stdout, stderr } => (
            status,
            String::from_utf8(stdout).unwrap(),
            String::from_utf8(stderr).unwrap(),
        ),
        other => panic!("expected bytes output, got {other:?}"),
    }
}

/// What stock Lua 5.4.9 did with `source` as a script fed `stdin`: its
/// exit status, stdout and stderr. The script should return nothing: the
/// stock interpreter prints returned values and a newline after a script
/// that ends normally (that newline is removed here), none after
/// `os.exit` (say whether the script `exits`).
pub fn stock_process(source: &str, stdin: &[u8], exits: bool) -> (i32, String, String) {
    let file = quirl_lua_testkit::stock::SourceFile::new(source).unwrap();
    let mut child = Command::new(quirl_lua_testkit::stock::path())
        .arg(file.path())
        .arg("=script.lua")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&bytes);
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let mut stdout = String::from_utf8(output.stdout).unwrap();
    if !exits && output.status.success() && stdout.ends_with('\n') {
        // The newline the interpreter prints after the (no) results.
        stdout.pop();
    }
    (
        output.status.code().unwrap_or(-1),
        stdout,
        String::from_utf8(output.stderr).unwrap(),
    )
}
