//! JSON Schema (draft 2020-12, via schemars) of both frame directions.
//!
//! The committed copies live in `fixtures/schema/parent_to_worker.snap.json`
//! and `fixtures/schema/worker_to_parent.snap.json` (plain JSON, `insta`
//! snapshots); `tests/schema.rs` fails when they drift from the types
//! (`cargo insta review`, or `INSTA_UPDATE=always` to accept).
//!
//! The schema describes shape, closed records (`additionalProperties:
//! false`), enum spellings and the simple numeric ranges. It cannot say
//! everything the decoder enforces (duplicate keys, exact integer classes,
//! text and count bounds across fields, identity rules); SPEC.md and the
//! decoder are normative.

use crate::limits::{HOST_CALLS_PER_REQUEST_MAX, PROTOCOL_VERSION};
use crate::records::{CommandOutcome, Operation, ParentFrame, ShellError, WorkerFrame};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::Value;
use std::borrow::Cow;

/// The schema of parent→worker frames, as pretty JSON text.
pub fn parent_to_worker_schema() -> String {
    pretty(schemars::schema_for!(ParentFrame))
}

/// The schema of worker→parent frames, as pretty JSON text.
pub fn worker_to_parent_schema() -> String {
    pretty(schemars::schema_for!(WorkerFrame))
}

fn pretty(schema: Schema) -> String {
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

#[allow(dead_code)]
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Request")]
struct RequestSchema {
    #[schemars(range(min = PROTOCOL_VERSION, max = PROTOCOL_VERSION))]
    version: u32,
    id: u64,
    operation: Operation,
}

#[allow(dead_code)]
#[derive(JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "Response")]
enum ResponseSchema {
    Success(ResponseSuccess),
    Failure(ResponseFailure),
}

/// A successful response.
#[allow(dead_code)]
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct ResponseSuccess {
    #[schemars(range(min = PROTOCOL_VERSION, max = PROTOCOL_VERSION))]
    version: u32,
    id: u64,
    #[schemars(extend("const" = true))]
    ok: bool,
    result: Value,
}

/// A failed response.
#[allow(dead_code)]
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct ResponseFailure {
    #[schemars(range(min = PROTOCOL_VERSION, max = PROTOCOL_VERSION))]
    version: u32,
    id: u64,
    #[schemars(extend("const" = false))]
    ok: bool,
    result: (),
    error: ShellError,
}

#[allow(dead_code)]
#[derive(JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "HostResponse")]
enum HostResponseSchema {
    Outcome(HostResponseOutcome),
    Error(HostResponseError),
}

/// The process ran.
#[allow(dead_code)]
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct HostResponseOutcome {
    request_id: u64,
    #[schemars(range(min = 1, max = HOST_CALLS_PER_REQUEST_MAX))]
    call_id: u32,
    outcome: CommandOutcome,
}

/// The process could not run.
#[allow(dead_code)]
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct HostResponseError {
    request_id: u64,
    #[schemars(range(min = 1, max = HOST_CALLS_PER_REQUEST_MAX))]
    call_id: u32,
    error: ShellError,
}

macro_rules! delegate_schema {
    ($ty:ty => $schema:ty, $name:literal) => {
        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                Cow::Borrowed($name)
            }
            fn json_schema(generator: &mut SchemaGenerator) -> Schema {
                <$schema>::json_schema(generator)
            }
        }
    };
}

delegate_schema!(crate::records::Request => RequestSchema, "Request");
delegate_schema!(crate::records::Response => ResponseSchema, "Response");
delegate_schema!(crate::records::HostResponse => HostResponseSchema, "HostResponse");
