//! Serde-derived copies of the records Quirl 0.1 reads and writes
//! (`crates/quirl-cli/src/lua_worker.rs`): `deny_unknown_fields`,
//! internally tagged enums, free-form values as `serde_json::Value`. They
//! are the baseline of X1: what bare `serde_json::from_slice` / `to_vec`
//! does, with no strictness beyond serde's own. Nested host-domain records
//! that the measured frames never carry (execution contexts, events) are
//! kept as `Value`.
//!
//! Shared by `protocol/benches/codec.rs` and the `quirl-lua-bench` binary.

#![allow(dead_code)]

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorPolicy {
    allow_process: bool,
    memory_limit_bytes: u64,
    instruction_limit: u64,
    wall_time_ms: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "operation", rename_all = "snake_case", deny_unknown_fields)]
pub enum MirrorOperation {
    Initialize {
        protocol_descriptor: String,
        policy: MirrorPolicy,
        grants: Option<Vec<String>>,
        process_enabled: bool,
    },
    Eval {
        source: String,
    },
    Check {
        source: String,
        source_name: String,
    },
    LoadConfig {
        source: String,
        source_name: String,
    },
    LoadPlugin {
        source: String,
        source_name: String,
    },
    RenderPrompt {
        name: String,
        context: Value,
    },
    Complete {
        command: String,
        context: Value,
    },
    Contribution {
        kind: String,
        name: String,
        context: Value,
    },
    Run {
        source: String,
        source_name: String,
        context: Value,
    },
    PluginCommand {
        name: String,
        context: Value,
        deadline_ms: u64,
    },
    Event {
        event: Value,
    },
    Test {
        source: String,
        source_name: String,
    },
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorRequest {
    version: u32,
    id: u64,
    operation: MirrorOperation,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MirrorErrorCode {
    InvalidCommand,
    InvalidArgument,
    Data,
    Io,
    ProcessSpawn,
    ScriptRead,
    Lua,
    Validation,
    ResourceLimit,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorLabel {
    source: Option<String>,
    start: u32,
    end: u32,
    message: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorShellError {
    code: MirrorErrorCode,
    message: String,
    labels: Vec<MirrorLabel>,
    context: Vec<String>,
    help: Vec<String>,
    command: Option<String>,
    exit_status: Option<i32>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorResponse {
    version: u32,
    id: u64,
    ok: bool,
    #[serde(default)]
    result: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<MirrorShellError>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorHostCall {
    request_id: u64,
    call_id: u32,
    command: String,
    deadline_ms: u64,
    max_output_bytes: u64,
}

#[derive(Serialize, Deserialize)]
pub struct MirrorCommandOutcome {
    status: i32,
    stdout: Option<String>,
    stderr: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorHostResponse {
    request_id: u64,
    call_id: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    outcome: Option<MirrorCommandOutcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<MirrorShellError>,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum MirrorParentFrame {
    Request { request: MirrorRequest },
    HostResponse { response: MirrorHostResponse },
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum MirrorWorkerFrame {
    Response { response: MirrorResponse },
    HostCall { call: MirrorHostCall },
}
