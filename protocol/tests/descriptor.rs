#![allow(clippy::unwrap_used, clippy::expect_used)]
//! SPEC §8.2: the protocol descriptor states exactly the limits the crate enforces.

use quirl_lua_protocol::limits::*;

#[test]
fn descriptor_names_the_real_limits() {
    let d = LUA_WORKER_PROTOCOL_DESCRIPTOR;
    assert!(d.starts_with("quirl.lua-worker@1{"));
    let stated = [
        format!("frame:u32be-length<={FRAME_BYTES_MAX}+json"),
        format!("version={PROTOCOL_VERSION},id:u64"),
        format!("command<={HOST_COMMAND_BYTES_MAX}"),
        format!("max_output_bytes<={HOST_OUTPUT_BYTES_MAX}"),
        format!("memory_bytes:1..={POLICY_MEMORY_BYTES_MAX}"),
        format!("instructions:1..={POLICY_INSTRUCTIONS_MAX}"),
        format!("wall_time_ms:1..={POLICY_WALL_TIME_MS_MAX}"),
        format!("host-calls-per-request<={HOST_CALLS_PER_REQUEST_MAX}"),
        "call_id:u32".to_owned(),
        "labels.start/end:u32".to_owned(),
    ];
    for fact in stated {
        assert!(d.contains(&fact), "descriptor lacks `{fact}`");
    }
}

#[test]
fn every_number_in_the_descriptor_is_a_named_limit() {
    let d = LUA_WORKER_PROTOCOL_DESCRIPTOR;
    let named: Vec<u64> = vec![
        FRAME_BYTES_MAX as u64,
        HOST_COMMAND_BYTES_MAX as u64,
        HOST_OUTPUT_BYTES_MAX,
        POLICY_MEMORY_BYTES_MAX,
        POLICY_INSTRUCTIONS_MAX,
        POLICY_WALL_TIME_MS_MAX,
        u64::from(HOST_CALLS_PER_REQUEST_MAX),
        u64::from(PROTOCOL_VERSION),
    ];
    // Widths (u32, u64, u32be) and the version tag `@1` are types, not limits.
    let mut rest = d
        .replace("u32be", "")
        .replace("u32", "")
        .replace("u64", "")
        .replace("@1", "");
    rest = rest.replace("1..=", "");
    let numbers: Vec<u64> = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert!(numbers.len() >= 8, "{numbers:?}");
    for number in numbers {
        assert!(
            named.contains(&number),
            "descriptor number {number} is not a named limit"
        );
    }
}

#[test]
fn frame_limit_is_source_limit_plus_protocol_context() {
    assert_eq!(FRAME_BYTES_MAX, 5_242_880);
    assert_eq!(FRAME_BYTES_MAX, SOURCE_BYTES_MAX + FRAME_CONTEXT_BYTES);
    assert_eq!(WORKER_ARGUMENT, "--internal-lua-worker-v1");
}
