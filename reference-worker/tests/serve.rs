//! The serve loop in-process: the session around the VM, hostile parents,
//! host calls, and every operation through the protocol.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::{ErrorKind, LUA_WORKER_PROTOCOL_DESCRIPTOR};
use quirl_lua_reference_worker::{Ending, ServeOptions, WorkerError, serve};
use serde_json::{Value, json};
use std::io::{Cursor, Write};
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn frame(value: &Value) -> Vec<u8> {
    let payload = serde_json::to_vec(value).unwrap();
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend(payload);
    out
}

fn request(id: u64, operation: Value) -> Vec<u8> {
    frame(&json!({"kind": "request", "request": {"version": 1, "id": id, "operation": operation}}))
}

fn initialize_with(policy: Value, grants: Value, process_enabled: bool) -> Vec<u8> {
    request(
        1,
        json!({"operation": "initialize", "protocol_descriptor": LUA_WORKER_PROTOCOL_DESCRIPTOR,
               "policy": policy, "grants": grants, "process_enabled": process_enabled}),
    )
}

fn policy() -> Value {
    json!({"allow_process": true, "memory_limit_bytes": 16_777_216,
           "instruction_limit": 1_000_000, "wall_time_ms": 5_000})
}

fn initialize() -> Vec<u8> {
    initialize_with(policy(), Value::Null, false)
}

fn host_response(request_id: u64, call_id: u32, result: Value) -> Vec<u8> {
    let mut response = json!({"request_id": request_id, "call_id": call_id});
    let map = response.as_object_mut().unwrap();
    for (k, v) in result.as_object().unwrap() {
        map.insert(k.clone(), v.clone());
    }
    frame(&json!({"kind": "host_response", "response": response}))
}

struct Session {
    ending: Result<Ending, WorkerError>,
    raw: Vec<u8>,
    frames: Vec<Value>,
}

fn run(input: Vec<Vec<u8>>) -> Session {
    let sink = Sink::default();
    let ending = serve(
        Cursor::new(input.concat()),
        sink.clone(),
        ServeOptions::default(),
    );
    let raw = sink.0.lock().unwrap().clone();
    let mut frames = Vec::new();
    let mut rest = raw.as_slice();
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        frames.push(serde_json::from_slice(&rest[4..4 + len]).unwrap());
        rest = &rest[4 + len..];
    }
    Session {
        ending,
        raw,
        frames,
    }
}

/// The responses after initialize, as `Ok(result)` / `Err(error record)`.
fn answers(session: &Session) -> Vec<Result<Value, Value>> {
    session
        .frames
        .iter()
        .skip(1)
        .filter(|f| f["kind"] == "response")
        .map(|f| {
            let r = &f["response"];
            if r["ok"] == true {
                Ok(r["result"].clone())
            } else {
                Err(r["error"].clone())
            }
        })
        .collect()
}

fn one(operation: Value) -> Result<Value, Value> {
    let session = run(vec![initialize(), request(2, operation)]);
    assert_eq!(session.ending.as_ref().ok(), Some(&Ending::EndOfInput));
    answers(&session).remove(0)
}

fn violation(session: &Session) -> ErrorKind {
    match &session.ending {
        Err(error) => error.kind(),
        Ok(ending) => panic!("expected a violation, the session ended {ending:?}"),
    }
}

fn no_success_after_initialize(session: &Session) {
    assert!(
        session
            .frames
            .iter()
            .skip(1)
            .all(|f| f["response"]["ok"] != true),
        "{:?}",
        session.frames
    );
}

#[test]
fn answers_the_quirl_fixture_byte_for_byte() {
    let fixture = br#"{"kind":"request","request":{"version":1,"id":7,"operation":{"operation":"eval","source":"return 42"}}}"#;
    let mut eval = (fixture.len() as u32).to_be_bytes().to_vec();
    eval.extend_from_slice(fixture);
    let session = run(vec![initialize(), eval]);
    let expected = br#"{"kind":"response","response":{"version":1,"id":7,"ok":true,"result":42}}"#;
    assert!(session.raw.ends_with(expected));
    assert_eq!(
        &session.raw[session.raw.len() - expected.len() - 4..session.raw.len() - expected.len()],
        &(expected.len() as u32).to_be_bytes()
    );
    assert_eq!(session.ending.unwrap(), Ending::EndOfInput);
}

#[test]
fn initialize_answers_null() {
    let session = run(vec![initialize()]);
    assert_eq!(
        serde_json::to_string(&session.frames[0]).unwrap(),
        r#"{"kind":"response","response":{"id":1,"ok":true,"result":null,"version":1}}"#
    );
}

#[test]
fn end_of_input_at_a_frame_boundary_is_a_clean_end() {
    assert_eq!(run(vec![]).ending.unwrap(), Ending::EndOfInput);
    assert_eq!(run(vec![initialize()]).ending.unwrap(), Ending::EndOfInput);
}

#[test]
fn end_of_input_inside_a_frame_is_a_violation() {
    let mut cut = initialize();
    cut.truncate(10);
    assert_eq!(violation(&run(vec![cut])), ErrorKind::TruncatedFrame);
    assert_eq!(
        violation(&run(vec![vec![0, 0]])),
        ErrorKind::TruncatedHeader
    );
}

// SPEC §15.1-a
#[test]
fn a_request_before_initialize_is_a_violation() {
    let session = run(vec![request(
        1,
        json!({"operation": "eval", "source": "return 1"}),
    )]);
    assert_eq!(violation(&session), ErrorKind::UnexpectedFrame);
    assert!(session.frames.is_empty());
}

#[test]
fn a_second_initialize_is_a_violation() {
    let second = request(
        2,
        json!({"operation": "initialize", "protocol_descriptor": LUA_WORKER_PROTOCOL_DESCRIPTOR,
               "policy": policy(), "grants": null, "process_enabled": false}),
    );
    let session = run(vec![initialize(), second]);
    assert_eq!(violation(&session), ErrorKind::UnexpectedFrame);
    assert_eq!(session.frames.len(), 1);
}

#[test]
fn a_host_response_without_a_host_call_is_a_violation() {
    let session = run(vec![
        initialize(),
        host_response(
            1,
            1,
            json!({"outcome": {"status": 0, "stdout": "", "stderr": ""}}),
        ),
    ]);
    assert_eq!(violation(&session), ErrorKind::UnexpectedFrame);
}

// SPEC §15.1-a, §8.2-a, §10-b: a bad descriptor or policy is a violation, no VM is built, nothing
// is answered.
#[test]
fn an_invalid_initialize_builds_no_vm() {
    let bad_descriptor = request(
        1,
        json!({"operation": "initialize", "protocol_descriptor": "quirl.lua-worker@2",
               "policy": policy(), "grants": null, "process_enabled": false}),
    );
    assert_eq!(
        violation(&run(vec![bad_descriptor])),
        ErrorKind::DescriptorMismatch
    );
    let mut bad_policy = policy();
    bad_policy["memory_limit_bytes"] = json!(0);
    let session = run(vec![initialize_with(bad_policy, Value::Null, false)]);
    assert_eq!(violation(&session), ErrorKind::PolicyOutOfRange);
    assert!(session.frames.is_empty());
}

// SPEC §9.1-a
#[test]
fn request_ids_must_increase() {
    let session = run(vec![
        initialize(),
        request(5, json!({"operation": "eval", "source": "return 1"})),
        request(5, json!({"operation": "eval", "source": "return 2"})),
    ]);
    assert_eq!(violation(&session), ErrorKind::IdentityMismatch);
    assert_eq!(answers(&session), vec![Ok(json!(1))]);
}

#[test]
fn a_memory_limit_below_the_sandbox_fails_initialize_and_retires() {
    let mut tiny = policy();
    tiny["memory_limit_bytes"] = json!(1);
    let session = run(vec![
        initialize_with(tiny, Value::Null, false),
        request(2, json!({"operation": "eval", "source": "return 1"})),
    ]);
    assert_eq!(session.ending.as_ref().ok(), Some(&Ending::Retired));
    assert_eq!(session.frames.len(), 1);
    assert_eq!(
        session.frames[0]["response"]["error"]["code"],
        "resource_limit"
    );
}

// SPEC §13.1-a
#[test]
fn a_tripped_limit_is_answered_then_the_worker_retires() {
    let session = run(vec![
        initialize(),
        request(
            2,
            json!({"operation": "eval", "source": "return pcall(function() while true do end end)"}),
        ),
        request(3, json!({"operation": "eval", "source": "return 1"})),
    ]);
    assert_eq!(session.ending.as_ref().ok(), Some(&Ending::Retired));
    let answers = answers(&session);
    assert_eq!(answers.len(), 1);
    let error = answers[0].clone().unwrap_err();
    assert_eq!(error["code"], "resource_limit");
    assert!(
        error["context"]
            .as_array()
            .unwrap()
            .contains(&json!("limit: instructions"))
    );
}

// SPEC §15.1-c
#[test]
fn state_persists_and_budgets_reset_across_requests() {
    let loop_half = "local n = 0 for i = 1, 200000 do n = n + 1 end return n";
    let session = run(vec![
        initialize(),
        request(2, json!({"operation": "eval", "source": "x = 41"})),
        request(3, json!({"operation": "eval", "source": loop_half})),
        request(4, json!({"operation": "eval", "source": loop_half})),
        request(5, json!({"operation": "eval", "source": "return x + 1"})),
    ]);
    assert_eq!(
        answers(&session),
        vec![
            Ok(json!(null)),
            Ok(json!(200000)),
            Ok(json!(200000)),
            Ok(json!(42))
        ]
    );
}

const PLUGIN: &str = r#"
quirl.prompt.add_segment{ name = "clock", render = function(ctx) return "t=" .. ctx.tick end }
quirl.completion.add_provider{ command = "git", complete = function(ctx)
  return { "status", { value = "commit", summary = "record changes" } } end }
quirl.extension.contribute{ kind = "panel", name = "side", deadline_ms = 20,
  plain_fallback = "side panel", provide = function(ctx) return { rows = { ctx.n } } end }
quirl.events.subscribe{ name = "watch", events = { "output", "result" },
  capabilities = { "events_observe", "output_read" }, deadline_ms = 20,
  observe = function(event)
    if event.data.kind == "output" then
      return { { action = "diagnose", message = "saw " .. event.data.text } }
    end
    return {}
  end }
quirl.events.subscribe{ name = "blind", events = { "output" },
  capabilities = { "events_observe" }, deadline_ms = 20,
  observe = function(event) return { { action = "annotate_result", key = "has_text",
    value = event.data.text ~= nil } } end }
quirl.plugin.command{ name = "greet", signature = "greet <name>", summary = "Say hello",
  details = "Greets someone.", input_type = "Nothing", output_type = "String",
  examples = { "greet ada" }, effects = { "none" }, error_codes = { E1 = "never" },
  run = function(ctx) return { abi_version = 1, ok = true, status = 0,
    output = { kind = "value", value = { type = "string", value = "hello " .. ctx.args[1] } } } end }
"#;

fn plugin_session(rest: Vec<Vec<u8>>) -> Vec<Result<Value, Value>> {
    let grants = json!([
        "prompt.register",
        "completion.register",
        "commands.register",
        "events.observe",
        "extension.contribute",
        "catalog.register",
        "ui.panel",
        "output.read"
    ]);
    let mut input = vec![
        initialize_with(policy(), grants, false),
        request(
            2,
            json!({"operation": "load_plugin", "source": PLUGIN, "source_name": "plugin.lua"}),
        ),
    ];
    input.extend(rest);
    let session = run(input);
    assert_eq!(
        session.ending.as_ref().ok(),
        Some(&Ending::EndOfInput),
        "{:?}",
        session.frames
    );
    answers(&session)
}

fn execution_context() -> Value {
    json!({"arguments": ["ada"], "environment": {"HOME": "/home/ada"}, "working_directory": "/w",
           "input": {"kind": "none"}, "output": {"kind": "value"},
           "declared_effects": {"read_filesystem": false, "write_filesystem": false,
                                "spawn_process": false, "change_directory": false}})
}

#[test]
fn load_plugin_returns_the_registrations() {
    let answers = plugin_session(vec![]);
    let registrations = answers[0].clone().unwrap();
    assert_eq!(
        registrations["prompt_segments"],
        json!([{"deadline_ms": 8, "name": "clock"}])
    );
    assert_eq!(
        registrations["completion_providers"],
        json!([{"command": "git"}])
    );
    assert_eq!(
        registrations["contributions"],
        json!([{"deadline_ms": 20, "kind": "panel", "name": "side", "plain_fallback": "side panel"}])
    );
    assert_eq!(registrations["events"].as_array().unwrap().len(), 2);
    assert_eq!(
        registrations["commands"][0]["error_codes"],
        json!({"E1": "never"})
    );
}

#[test]
fn plugin_callbacks_answer_their_operations() {
    let answers = plugin_session(vec![
        request(
            3,
            json!({"operation": "render_prompt", "name": "clock", "context": {"tick": 5}}),
        ),
        request(
            4,
            json!({"operation": "complete", "command": "git", "context": {}}),
        ),
        request(
            5,
            json!({"operation": "contribution", "kind": "panel", "name": "side", "context": {"n": 1}}),
        ),
        request(
            6,
            json!({"operation": "event", "event": {"protocol_version": 2, "sequence": 1,
            "data": {"kind": "output", "stream": "stdout", "bytes": 2, "text": "hi"}}}),
        ),
        request(
            7,
            json!({"operation": "plugin_command", "name": "greet",
            "context": execution_context(), "deadline_ms": 1000}),
        ),
    ]);
    assert_eq!(answers[1], Ok(json!("t=5")));
    assert_eq!(
        answers[2],
        Ok(json!(["status", {"summary": "record changes", "value": "commit"}]))
    );
    assert_eq!(answers[3], Ok(json!({"rows": [1]})));
    assert_eq!(
        answers[4],
        Ok(json!([
            {"actions": [{"action": "annotate_result", "key": "has_text", "value": false}],
             "error": null, "handler": "blind"},
            {"actions": [{"action": "diagnose", "message": "saw hi"}], "error": null, "handler": "watch"}
        ]))
    );
    assert_eq!(
        answers[5],
        Ok(json!({"cleanup": "complete", "diagnostics": [],
                  "output": {"kind": "value", "value": {"type": "string", "value": "hello ada"}},
                  "status": {"code": 0, "kind": "exited"}}))
    );
}

#[test]
fn plugin_operations_fail_cleanly() {
    let answers = plugin_session(vec![
        request(
            3,
            json!({"operation": "render_prompt", "name": "nope", "context": {}}),
        ),
        request(
            4,
            json!({"operation": "complete", "command": "nope", "context": {}}),
        ),
        request(
            5,
            json!({"operation": "contribution", "kind": "catalog", "name": "side", "context": {}}),
        ),
        request(
            6,
            json!({"operation": "plugin_command", "name": "nope",
            "context": execution_context(), "deadline_ms": 1000}),
        ),
        request(
            7,
            json!({"operation": "event", "event": {"protocol_version": 2, "sequence": 5,
            "data": {"kind": "result", "status": 0, "duration_ms": 1}}}),
        ),
        request(
            8,
            json!({"operation": "event", "event": {"protocol_version": 2, "sequence": 5,
            "data": {"kind": "result", "status": 0, "duration_ms": 1}}}),
        ),
        request(
            9,
            json!({"operation": "render_prompt", "name": "clock", "context": {}}),
        ),
    ]);
    for answer in &answers[1..5] {
        assert_eq!(
            answer.clone().unwrap_err()["code"],
            "validation",
            "{answer:?}"
        );
    }
    assert_eq!(
        answers[5],
        Ok(json!([{"actions": [], "error": null, "handler": "watch"}]))
    );
    assert_eq!(
        answers[6].clone().unwrap_err()["code"],
        "validation",
        "sequence must increase"
    );
    let error = answers[7].clone().unwrap_err();
    assert_eq!(error["code"], "lua");
    assert_eq!(error["labels"][0]["source"], PLUGIN);
}

#[test]
fn a_plugin_that_registers_nothing_fails() {
    let answer =
        one(json!({"operation": "load_plugin", "source": "x = 1", "source_name": "p.lua"}));
    assert_eq!(answer.unwrap_err()["code"], "validation");
    let answer =
        one(json!({"operation": "load_plugin", "source": "error('no')", "source_name": "p.lua"}));
    assert_eq!(answer.unwrap_err()["code"], "lua");
    let answer = one(json!({"operation": "load_plugin",
        "source": "quirl.prompt.add_segment{ name = 'a', deadline_ms = 0, render = print }",
        "source_name": "p.lua"}));
    assert_eq!(answer.unwrap_err()["code"], "validation");
}

#[test]
fn check_compiles_without_running() {
    assert_eq!(
        one(
            json!({"operation": "check", "source": "#!/usr/bin/env lua\nwhile true do end", "source_name": "c.lua"})
        ),
        Ok(Value::Null)
    );
    let error = one(json!({"operation": "check", "source": "local = 1", "source_name": "c.lua"}))
        .unwrap_err();
    assert_eq!(error["code"], "lua");
    assert_eq!(error["labels"][0]["start"], 0);
}

#[test]
fn load_config_returns_the_validated_configuration() {
    let config = one(
        json!({"operation": "load_config", "source_name": "init.lua",
        "source": "return quirl.config{ editor = { keymap = 'vim' }, schema_version = 3 }"}),
    )
    .unwrap();
    assert_eq!(config["editor"]["keymap"], "vim");
    assert_eq!(config["schema_version"], 4);
    let error = one(
        json!({"operation": "load_config", "source_name": "init.lua",
        "source": "return { editor = { keymap = 'ed' } }"}),
    )
    .unwrap_err();
    assert_eq!(error["code"], "validation");
    let error =
        one(json!({"operation": "load_config", "source_name": "init.lua", "source": "x = 1"}))
            .unwrap_err();
    assert_eq!(error["code"], "validation");
}

#[test]
fn run_speaks_the_runner_abi() {
    let module = r#"return { abi_version = 1, main = function(ctx)
        return { abi_version = 1, ok = true, status = 3, output = { kind = "values",
          values = { { type = "string", value = ctx.cwd }, { type = "int", value = #ctx.args },
                     { type = "string", value = ctx.env.HOME }, { type = "bool", value = ctx.cancellation.is_cancelled() } } } }
      end }"#;
    let outcome = one(
        json!({"operation": "run", "source": module, "source_name": "m.lua",
        "context": execution_context()}),
    )
    .unwrap();
    assert_eq!(outcome["status"], json!({"code": 3, "kind": "exited"}));
    assert_eq!(
        outcome["output"]["values"],
        json!([{"type": "string", "value": "/w"}, {"type": "int", "value": 1},
               {"type": "string", "value": "/home/ada"}, {"type": "bool", "value": false}])
    );
    let legacy = one(
        json!({"operation": "run", "source": "return { status = 2, v = 'x' }",
        "source_name": "m.lua", "context": execution_context()}),
    )
    .unwrap();
    assert_eq!(legacy["status"]["code"], 2);
    let failed = one(json!({"operation": "run", "source_name": "m.lua", "context": execution_context(),
        "source": "return { abi_version = 1, main = function() return { abi_version = 1, ok = false, error = { code = 'invalid_argument', message = 'bad input' } } end }"}))
    .unwrap_err();
    assert_eq!(failed["code"], "invalid_argument");
    assert_eq!(failed["message"], "bad input");
    let unknown = one(
        json!({"operation": "run", "source_name": "m.lua", "context": execution_context(),
        "source": "return { abi_version = 1, main = function() end, extra = 1 }"}),
    )
    .unwrap_err();
    assert_eq!(unknown["code"], "validation");
    let future = one(
        json!({"operation": "run", "source_name": "m.lua", "context": execution_context(),
        "source": "return { abi_version = 2, main = function() end }"}),
    )
    .unwrap_err();
    assert_eq!(future["code"], "validation");
}

#[test]
fn test_counts_test_functions_in_name_order() {
    let count = one(json!({"operation": "test", "source_name": "t.lua",
        "source": "order = {} return { test_b = function() order[#order+1] = 'b' end, test_a = function() order[#order+1] = 'a' end, helper = 1 }"}));
    assert_eq!(count, Ok(json!(2)));
    let none = one(json!({"operation": "test", "source_name": "t.lua", "source": "return {}"}));
    assert_eq!(none.unwrap_err()["code"], "validation");
    let failing = one(json!({"operation": "test", "source_name": "t.lua",
        "source": "return { test_x = function() error('nope') end }"}))
    .unwrap_err();
    assert_eq!(failing["code"], "lua");
    assert!(
        failing["context"]
            .as_array()
            .unwrap()
            .contains(&json!("test: test_x"))
    );
}

fn process_run_session(grants: Value, process_enabled: bool, rest: Vec<Vec<u8>>) -> Session {
    let mut input = vec![initialize_with(policy(), grants, process_enabled)];
    input.extend(rest);
    run(input)
}

const RUN_LS: &str = "local r = quirl.process.run('ls -l') return { ok = r.ok, status = r.status, value = r.value, stderr = r.stderr }";

// SPEC §15.1-f
#[test]
fn process_run_sends_a_host_call_and_returns_the_outcome() {
    let session = process_run_session(
        Value::Null,
        true,
        vec![
            request(2, json!({"operation": "eval", "source": RUN_LS})),
            host_response(
                2,
                1,
                json!({"outcome": {"status": 0, "stdout": "a\n", "stderr": null}}),
            ),
        ],
    );
    assert_eq!(session.ending.as_ref().ok(), Some(&Ending::EndOfInput));
    let call = &session.frames[1];
    assert_eq!(call["kind"], "host_call");
    assert_eq!(call["call"]["request_id"], 2);
    assert_eq!(call["call"]["call_id"], 1);
    assert_eq!(call["call"]["command"], "ls -l");
    assert_eq!(call["call"]["max_output_bytes"], 1_048_576);
    assert!(call["call"]["deadline_ms"].as_u64().unwrap() >= 1);
    assert_eq!(
        answers(&session).last().unwrap(),
        &Ok(json!({"ok": true, "status": 0, "value": "a\n", "stderr": ""}))
    );
}

#[test]
fn process_run_reports_nonzero_status_and_host_errors_to_the_guest() {
    let session = process_run_session(
        Value::Null,
        true,
        vec![
            request(
                2,
                json!({"operation": "eval", "source":
                "local r = quirl.process.run('false') local ok, e = pcall(quirl.process.run, 'x') return { r.error.code, r.error.exit_status, ok }"}),
            ),
            host_response(
                2,
                1,
                json!({"outcome": {"status": 1, "stdout": "", "stderr": "no"}}),
            ),
            host_response(
                2,
                2,
                json!({"error": {"code": "invalid_argument", "message": "refused",
                "labels": [], "context": [], "help": [], "command": null, "exit_status": null}}),
            ),
        ],
    );
    assert_eq!(
        answers(&session).last().unwrap(),
        &Ok(json!(["invalid_command", 1, false]))
    );
}

#[test]
fn process_run_checks_its_capability_before_any_host_call() {
    for (grants, enabled, policy_allows) in [
        (Value::Null, false, true),
        (json!(["prompt.register"]), true, true),
        (Value::Null, true, false),
    ] {
        let mut p = policy();
        p["allow_process"] = json!(policy_allows);
        let session = run(vec![
            initialize_with(p, grants.clone(), enabled),
            request(2, json!({"operation": "eval", "source": RUN_LS})),
        ]);
        assert_eq!(
            session.frames.len(),
            2,
            "{grants} {enabled}: {:?}",
            session.frames
        );
        assert_eq!(answers(&session)[0].clone().unwrap_err()["code"], "lua");
    }
    let session = process_run_session(
        json!(["process.spawn:ls"]),
        true,
        vec![request(
            2,
            json!({"operation": "eval", "source": "return pcall(quirl.process.run, 'rm -rf /')"}),
        )],
    );
    assert_eq!(answers(&session), vec![Ok(json!(false))]);
}

#[test]
fn a_seventeenth_host_call_trips_a_sticky_limit_that_pcall_cannot_swallow() {
    // Sixteen calls are answered; the 17th never reaches the wire, and the
    // guest's pcall around it (and every later pcall) cannot turn the
    // request into a success.
    let mut input = vec![request(
        2,
        json!({"operation": "eval", "source":
                "for i = 1, 16 do quirl.process.run('true') end \
                 local ok = pcall(quirl.process.run, 'true') \
                 local again = pcall(function() return 1 end) \
                 return { ok, again, 'survived' }"}),
    )];
    for call in 1..=16 {
        input.push(host_response(
            2,
            call,
            json!({"outcome": {"status": 0, "stdout": "", "stderr": ""}}),
        ));
    }
    input.push(request(
        3,
        json!({"operation": "eval", "source": "return 1"}),
    ));
    let session = process_run_session(Value::Null, true, input);
    assert_eq!(session.ending.as_ref().ok(), Some(&Ending::Retired));
    assert_eq!(
        session
            .frames
            .iter()
            .filter(|f| f["kind"] == "host_call")
            .count(),
        16
    );
    let answers = answers(&session);
    assert_eq!(answers.len(), 1, "the request is answered, nothing after");
    let error = answers[0].clone().unwrap_err();
    assert_eq!(error["code"], "resource_limit");
    let context = error["context"].as_array().unwrap();
    assert!(context.contains(&json!("limit: host_calls")), "{error}");
    assert!(
        context.contains(&json!("observed: 17 host calls; limit: 16")),
        "{error}"
    );
}

// SPEC §9.2-f
#[test]
fn host_output_is_bounded_by_the_call_with_lossy_bytes_counted_once() {
    // The worker asks for at most 1 MiB per stream. Invalid UTF-8 decoded
    // lossily becomes U+FFFD (3 bytes) per raw byte: 1 MiB of it is 3 MiB of
    // text and still within the call's limit.
    let limit = 1024 * 1024;
    let lossy = "\u{FFFD}".repeat(limit);
    let session = process_run_session(
        Value::Null,
        true,
        vec![
            request(
                2,
                json!({"operation": "eval", "source": "return #quirl.process.run('cat').value"}),
            ),
            host_response(
                2,
                1,
                json!({"outcome": {"status": 0, "stdout": lossy, "stderr": null}}),
            ),
        ],
    );
    assert_eq!(session.ending.as_ref().ok(), Some(&Ending::EndOfInput));
    assert_eq!(answers(&session).last().unwrap(), &Ok(json!(3 * limit)));
    // One byte more than the call allows is a violation the guest never sees.
    let session = process_run_session(
        Value::Null,
        true,
        vec![
            request(
                2,
                json!({"operation": "eval", "source": "pcall(quirl.process.run, 'cat') return 'survived'"}),
            ),
            host_response(
                2,
                1,
                json!({"outcome": {"status": 0, "stdout": "", "stderr": "e".repeat(limit + 1)}}),
            ),
        ],
    );
    assert_eq!(
        session.ending.as_ref().err().map(WorkerError::kind),
        Some(ErrorKind::DomainBounds)
    );
    no_success_after_initialize(&session);
}

// SPEC §9.2-d, §9.2-e, §15.1-h, §9.6-a: wrong ids, neither or both of outcome and error: the worker
// ends, guest pcall never returns, no error response.
#[test]
fn a_bad_host_response_is_a_violation_the_guest_never_sees() {
    let guarded = "local ok = pcall(quirl.process.run, 'ls') return 'survived'";
    for bad in [
        host_response(
            2,
            2,
            json!({"outcome": {"status": 0, "stdout": "", "stderr": ""}}),
        ),
        host_response(
            3,
            1,
            json!({"outcome": {"status": 0, "stdout": "", "stderr": ""}}),
        ),
        host_response(2, 1, json!({})),
        host_response(
            2,
            1,
            json!({"outcome": {"status": 0, "stdout": "", "stderr": ""},
            "error": {"code": "io", "message": "m", "labels": [], "context": [], "help": [], "command": null, "exit_status": null}}),
        ),
        host_response(
            2,
            1,
            json!({"outcome": {"status": 0, "stdout": "", "stderr": "", "extra": 1}}),
        ),
        request(3, json!({"operation": "eval", "source": "return 1"})),
        vec![0, 0, 0],
    ] {
        let session = process_run_session(
            Value::Null,
            true,
            vec![
                request(2, json!({"operation": "eval", "source": guarded})),
                bad,
            ],
        );
        assert!(session.ending.is_err(), "{:?}", session.frames);
        no_success_after_initialize(&session);
        assert_eq!(
            session.frames.len(),
            2,
            "only the host call is written: {:?}",
            session.frames
        );
    }
}

#[test]
fn a_host_resource_limit_stops_the_request() {
    let session = process_run_session(
        Value::Null,
        true,
        vec![
            request(
                2,
                json!({"operation": "eval", "source": "local ok = pcall(quirl.process.run, 'sleep 9') return 'survived'"}),
            ),
            host_response(
                2,
                1,
                json!({"error": {"code": "resource_limit", "message": "deadline",
                "labels": [], "context": [], "help": [], "command": null, "exit_status": null}}),
            ),
        ],
    );
    assert_eq!(session.ending.as_ref().ok(), Some(&Ending::Retired));
    assert_eq!(
        answers(&session)[0].clone().unwrap_err()["message"],
        "deadline"
    );
}

// SPEC §4.2-a
#[test]
fn a_result_too_large_for_one_frame_is_answered_with_an_error() {
    let plugin = r#"
for h = 1, 25 do
  quirl.events.subscribe{ name = "h" .. h, events = { "result" }, capabilities = { "events_observe" },
    deadline_ms = 250, observe = function()
      local actions = {}
      for i = 1, 60 do actions[i] = { action = "diagnose", message = string.rep("m", 4000) } end
      return actions
    end }
end"#;
    let mut big = policy();
    big["instruction_limit"] = json!(100_000_000);
    big["memory_limit_bytes"] = json!(67_108_864);
    let session = run(vec![
        initialize_with(big, Value::Null, false),
        request(
            2,
            json!({"operation": "load_plugin", "source": plugin, "source_name": "p.lua"}),
        ),
        request(
            3,
            json!({"operation": "event", "event": {"protocol_version": 2, "sequence": 1,
            "data": {"kind": "result", "status": 0, "duration_ms": 1}}}),
        ),
        request(4, json!({"operation": "eval", "source": "return 1"})),
    ]);
    assert_eq!(session.ending.as_ref().ok(), Some(&Ending::EndOfInput));
    let answers = answers(&session);
    let error = answers[1].clone().unwrap_err();
    assert_eq!(error["code"], "resource_limit", "{error}");
    assert_eq!(answers[2], Ok(json!(1)));
}
