//! Byte-exact success results: the response frames of every success path
//! (configuration, registrations, callbacks, events, runner outcomes,
//! tests) pinned as the reference worker wrote them before it built its
//! records from the protocol crate's types (SPEC §12.1 canonical form,
//! §15.10 results). A change of the record model must not change a byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::LUA_WORKER_PROTOCOL_DESCRIPTOR;
use quirl_lua_reference_worker::{Ending, ServeOptions, serve};
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

/// The operations after `initialize`, in order; response frame `n` answers
/// operation `n - 1` (frame 0 answers `initialize`).
const OPERATIONS: &str = r##"[
 {
  "operation": "eval",
  "source": "return {b = 1, a = {2.0, 'x', true}}"
 },
 {
  "operation": "check",
  "source": "return 1",
  "source_name": "c"
 },
 {
  "operation": "load_config",
  "source": "return { schema_version = 2, editor = { keymap = \"vim\", semantic_hints = false }, prompt = { left = {}, symbols = \"plain\" },\n  ui = { theme = \"mine\", themes = { mine = { accent_command = \"#000000\", accent_data = \"#111111\", context_primary = \"#222222\", context_secondary = \"#333333\",\n   muted = \"#444444\", border = \"#555555\", status_background = \"#666666\", error = \"#777777\", warning = \"#888888\", hint = \"#999999\",\n   string = \"#aaaaaa\", operator = \"#bbbbbb\", expansion = \"#cccccc\", number = \"#dddddd\" } }, statusline = { hints = false } },\n  completion = { min_chars = 3 } }",
  "source_name": "init.lua"
 },
 {
  "operation": "load_config",
  "source": "return {}",
  "source_name": "init.lua"
 },
 {
  "operation": "load_config",
  "source": "quirl.config{ picker = { preview = false } }",
  "source_name": "init.lua"
 },
 {
  "operation": "load_plugin",
  "source": "\nquirl.prompt.add_segment{ name = \"dir\", render = function(ctx) return \"seg:\" .. tostring(ctx.n) end }\nquirl.prompt.add_segment{ name = \"slow\", deadline_ms = 50, render = function() return nil end }\nquirl.completion.add_provider{ command = \"git\", complete = function(ctx) return {\"alpha\", {value = \"beta\", detail = \"second\", display = \"B\"}} end }\nquirl.plugin.command{ name = \"hello\", signature = \"hello [name]\", summary = \"Greets\", details = \"Says hello\",\n  input_type = \"Nothing\", output_type = \"Values<String>\", examples = {\"hello\", \"hello bob\"}, effects = {\"none\"},\n  error_codes = {E_NO = \"no\", E_YES = \"yes\"},\n  run = function(ctx) return { abi_version = 1, ok = true, status = 0, output = { kind = \"values\", values = {\n     {type = \"string\", value = \"hi \" .. (ctx.args[1] or \"?\")}, {type = \"record\", value = {b = {type=\"int\", value=1}, a = {type = \"list\", value = {}}}},\n     {type = \"duration\", value = {nanoseconds = 5}}, {type = \"size\", value = {bytes = 7}}, {type = \"nothing\"}, {type=\"u_int\", value=3},\n     {type = \"decimal\", value = \"1.5\"}, {type=\"path\", value=\"/x\"}, {type=\"date_time\", value=\"2020\"}, {type=\"pattern\", value=\"*.rs\"}, {type=\"bool\", value=true} } } } end }\nquirl.events.subscribe{ name = \"watch\", events = {\"output\", \"command_plan\", \"error\"}, capabilities = {\"events_observe\", \"output_read\", \"plan_rewrite\", \"environment_mutate\", \"execution_block\"}, deadline_ms = 100,\n  observe = function(ev) return { {action = \"diagnose\", message = \"saw \" .. tostring(ev.data.text)}, {action = \"annotate_result\", key = \"k.x\", value = {z = 1, a = {true, 2.5, \"s\"}}},\n     {action = \"set_environment\", name = \"A_B\", value = \"v\"}, {action = \"rewrite_plan\", source = \"ls\"}, {action = \"block_execution\", reason = \"no\"} } end }\nquirl.events.subscribe{ name = \"another\", events = {\"output\"}, capabilities = {\"events_observe\"}, deadline_ms = 100,\n  observe = function(ev) return {} end }\nquirl.events.subscribe{ name = \"broken\", events = {\"output\"}, capabilities = {\"events_observe\"}, deadline_ms = 100,\n  observe = function(ev) error(\"boom\") end }\nquirl.extension.contribute{ kind = \"panel\", name = \"pan\", deadline_ms = 20, plain_fallback = \"plain\", provide = function(ctx) return {items = {\"x\"}, n = 1} end }\nquirl.extension.contribute{ kind = \"catalog\", name = \"cat\", deadline_ms = 20, provide = function(ctx) return \"c\" end }\n",
  "source_name": "plugin.lua"
 },
 {
  "operation": "render_prompt",
  "name": "dir",
  "context": {
   "n": 5
  }
 },
 {
  "operation": "render_prompt",
  "name": "slow",
  "context": {}
 },
 {
  "operation": "complete",
  "command": "git",
  "context": {
   "line": "g"
  }
 },
 {
  "operation": "contribution",
  "kind": "panel",
  "name": "pan",
  "context": {}
 },
 {
  "operation": "contribution",
  "kind": "catalog",
  "name": "cat",
  "context": {}
 },
 {
  "operation": "plugin_command",
  "name": "hello",
  "context": {
   "arguments": [
    "bob"
   ],
   "environment": {
    "A": "b"
   },
   "working_directory": "/",
   "input": {
    "kind": "value",
    "content": {
     "type": "record",
     "value": {
      "k": {
       "type": "list",
       "value": [
        {
         "type": "int",
         "value": 1
        }
       ]
      }
     }
    }
   },
   "output": {
    "kind": "value"
   },
   "declared_effects": {
    "read_filesystem": true,
    "write_filesystem": false,
    "spawn_process": false,
    "change_directory": false
   }
  },
  "deadline_ms": 1000
 },
 {
  "operation": "event",
  "event": {
   "protocol_version": 2,
   "sequence": 1,
   "data": {
    "kind": "output",
    "stream": "stdout",
    "bytes": 3,
    "text": "abc"
   }
  }
 },
 {
  "operation": "event",
  "event": {
   "protocol_version": 2,
   "sequence": 2,
   "data": {
    "kind": "command_plan",
    "source": "ls",
    "effects": [
     "x"
    ]
   }
  }
 },
 {
  "operation": "event",
  "event": {
   "protocol_version": 2,
   "sequence": 3,
   "data": {
    "kind": "error",
    "error": {
     "code": "io",
     "message": "m",
     "labels": [],
     "context": [],
     "help": [],
     "command": null,
     "exit_status": null
    }
   }
  }
 },
 {
  "operation": "run",
  "source": "return { abi_version = 1, main = function(ctx) return { abi_version = 1, ok = true, status = 2, output = { kind = 'value', value = { type = 'string', value = table.concat(ctx.args, ',') .. ctx.input.kind .. #ctx.effects .. ctx.env.A .. ctx.cwd } } } end }",
  "source_name": "r.lua",
  "context": {
   "arguments": [
    "bob"
   ],
   "environment": {
    "A": "b"
   },
   "working_directory": "/",
   "input": {
    "kind": "value",
    "content": {
     "type": "record",
     "value": {
      "k": {
       "type": "list",
       "value": [
        {
         "type": "int",
         "value": 1
        }
       ]
      }
     }
    }
   },
   "output": {
    "kind": "value"
   },
   "declared_effects": {
    "read_filesystem": true,
    "write_filesystem": false,
    "spawn_process": false,
    "change_directory": false
   }
  }
 },
 {
  "operation": "run",
  "source": "return { abi_version = 1, main = function(ctx) return { abi_version = 1, ok = true, status = 0, output = { kind = 'value', value = { type = 'int', value = ctx.input.content[3] } } } end }",
  "source_name": "r.lua",
  "context": {
   "arguments": [
    "bob"
   ],
   "environment": {
    "A": "b"
   },
   "working_directory": "/",
   "input": {
    "kind": "bytes",
    "content": [
     1,
     2,
     255
    ]
   },
   "output": {
    "kind": "value"
   },
   "declared_effects": {
    "read_filesystem": true,
    "write_filesystem": false,
    "spawn_process": false,
    "change_directory": false
   }
  }
 },
 {
  "operation": "run",
  "source": "return { status = 3, x = 1.5, y = {1, 2}, z = 'q', n = math.maxinteger }",
  "source_name": "legacy.lua",
  "context": {
   "arguments": [
    "bob"
   ],
   "environment": {
    "A": "b"
   },
   "working_directory": "/",
   "input": {
    "kind": "value",
    "content": {
     "type": "record",
     "value": {
      "k": {
       "type": "list",
       "value": [
        {
         "type": "int",
         "value": 1
        }
       ]
      }
     }
    }
   },
   "output": {
    "kind": "value"
   },
   "declared_effects": {
    "read_filesystem": true,
    "write_filesystem": false,
    "spawn_process": false,
    "change_directory": false
   }
  }
 },
 {
  "operation": "run",
  "source": "return { main = function(ctx) return {a = ctx.args[1]} end }",
  "source_name": "legacy2.lua",
  "context": {
   "arguments": [
    "bob"
   ],
   "environment": {
    "A": "b"
   },
   "working_directory": "/",
   "input": {
    "kind": "value",
    "content": {
     "type": "record",
     "value": {
      "k": {
       "type": "list",
       "value": [
        {
         "type": "int",
         "value": 1
        }
       ]
      }
     }
    }
   },
   "output": {
    "kind": "value"
   },
   "declared_effects": {
    "read_filesystem": true,
    "write_filesystem": false,
    "spawn_process": false,
    "change_directory": false
   }
  }
 },
 {
  "operation": "test",
  "source": "return { test_a = function() end, test_b = function() end }",
  "source_name": "t.lua"
 },
 {
  "operation": "run",
  "source": "return { abi_version = 1, main = function() return { abi_version = 1, ok = false, error = { code = 'invalid_argument', message = 'bad', context = {'c'}, labels = {{source = 'abc', start = 0, ['end'] = 1, message = 'here'}} } } end }",
  "source_name": "r.lua",
  "context": {
   "arguments": [
    "bob"
   ],
   "environment": {
    "A": "b"
   },
   "working_directory": "/",
   "input": {
    "kind": "value",
    "content": {
     "type": "record",
     "value": {
      "k": {
       "type": "list",
       "value": [
        {
         "type": "int",
         "value": 1
        }
       ]
      }
     }
    }
   },
   "output": {
    "kind": "value"
   },
   "declared_effects": {
    "read_filesystem": true,
    "write_filesystem": false,
    "spawn_process": false,
    "change_directory": false
   }
  }
 },
 {
  "operation": "load_config",
  "source": "return { editor = { keymap = 'ed' } }",
  "source_name": "c"
 },
 {
  "operation": "load_config",
  "source": "return { extra = 1 }",
  "source_name": "c"
 },
 {
  "operation": "load_plugin",
  "source": "quirl.prompt.add_segment{ name = 'x', deadline_ms = 500, render = function() end }",
  "source_name": "p"
 },
 {
  "operation": "load_plugin",
  "source": "for i = 1, 65 do quirl.prompt.add_segment{ name = 's' .. i, render = function() end } end",
  "source_name": "p"
 },
 {
  "operation": "load_plugin",
  "source": "quirl.prompt.add_segment{ name = 'x', render = function() end } quirl.prompt.add_segment{ name = 'x', render = function() end }",
  "source_name": "p"
 },
 {
  "operation": "load_plugin",
  "source": "quirl.prompt.add_segment{ name = 'x', bogus = 1, render = function() end }",
  "source_name": "p"
 },
 {
  "operation": "load_plugin",
  "source": "",
  "source_name": "p"
 }
]"##;

/// (response frame index, exact payload).
const EXPECTED: &[(usize, &str)] = &[
    (
        3,
        r##"{"kind":"response","response":{"version":1,"id":4,"ok":true,"result":{"completion":{"auto":true,"min_chars":3},"editor":{"banner":"compact","keymap":"vim","semantic_hints":false},"picker":{"layout":"adaptive","preview":true},"prompt":{"left":[],"right":["rust_version","jobs","duration","status"],"symbols":"plain","transient":true},"schema_version":4,"ui":{"statusline":{"hints":false},"surface":"auto","theme":"mine","themes":{"mine":{"accent_command":"#000000","accent_data":"#111111","border":"#555555","context_primary":"#222222","context_secondary":"#333333","error":"#777777","expansion":"#cccccc","hint":"#999999","muted":"#444444","number":"#dddddd","operator":"#bbbbbb","status_background":"#666666","string":"#aaaaaa","warning":"#888888"}}}}}}"##,
    ),
    (
        6,
        r##"{"kind":"response","response":{"version":1,"id":7,"ok":true,"result":{"commands":[{"details":"Says hello","effects":["none"],"error_codes":{"E_NO":"no","E_YES":"yes"},"examples":["hello","hello bob"],"input_type":"Nothing","name":"hello","output_type":"Values<String>","signature":"hello [name]","summary":"Greets"}],"completion_providers":[{"command":"git"}],"contributions":[{"deadline_ms":20,"kind":"panel","name":"pan","plain_fallback":"plain"},{"deadline_ms":20,"kind":"catalog","name":"cat","plain_fallback":null}],"events":[{"capabilities":["events_observe","output_read","plan_rewrite","environment_mutate","execution_block"],"deadline_ms":100,"events":["output","command_plan","error"],"name":"watch"},{"capabilities":["events_observe"],"deadline_ms":100,"events":["output"],"name":"another"},{"capabilities":["events_observe"],"deadline_ms":100,"events":["output"],"name":"broken"}],"prompt_segments":[{"deadline_ms":8,"name":"dir"},{"deadline_ms":50,"name":"slow"}]}}}"##,
    ),
    (
        7,
        r##"{"kind":"response","response":{"version":1,"id":8,"ok":true,"result":"seg:5"}}"##,
    ),
    (
        9,
        r##"{"kind":"response","response":{"version":1,"id":10,"ok":true,"result":["alpha",{"detail":"second","display":"B","value":"beta"}]}}"##,
    ),
    (
        10,
        r##"{"kind":"response","response":{"version":1,"id":11,"ok":true,"result":{"items":["x"],"n":1}}}"##,
    ),
    (
        12,
        r##"{"kind":"response","response":{"version":1,"id":13,"ok":true,"result":{"cleanup":"complete","diagnostics":[],"output":{"kind":"values","values":[{"type":"string","value":"hi bob"},{"type":"record","value":{"a":{"type":"list","value":[]},"b":{"type":"int","value":1}}},{"type":"duration","value":{"nanoseconds":5}},{"type":"size","value":{"bytes":7}},{"type":"nothing"},{"type":"u_int","value":3},{"type":"decimal","value":"1.5"},{"type":"path","value":"/x"},{"type":"date_time","value":"2020"},{"type":"pattern","value":"*.rs"},{"type":"bool","value":true}]},"status":{"code":0,"kind":"exited"}}}}"##,
    ),
    (
        14,
        r##"{"kind":"response","response":{"version":1,"id":15,"ok":true,"result":[{"actions":[{"action":"diagnose","message":"saw nil"},{"action":"annotate_result","key":"k.x","value":{"a":[true,2.5,"s"],"z":1}},{"action":"set_environment","name":"A_B","value":"v"},{"action":"rewrite_plan","source":"ls"},{"action":"block_execution","reason":"no"}],"error":null,"handler":"watch"}]}}"##,
    ),
    (
        16,
        r##"{"kind":"response","response":{"version":1,"id":17,"ok":true,"result":{"cleanup":"complete","diagnostics":[],"output":{"kind":"value","value":{"type":"string","value":"bobvalue1b/"}},"status":{"code":2,"kind":"exited"}}}}"##,
    ),
    (
        17,
        r##"{"kind":"response","response":{"version":1,"id":18,"ok":true,"result":{"cleanup":"complete","diagnostics":[],"output":{"kind":"value","value":{"type":"int","value":255}},"status":{"code":0,"kind":"exited"}}}}"##,
    ),
    (
        18,
        r##"{"kind":"response","response":{"version":1,"id":19,"ok":true,"result":{"cleanup":"complete","diagnostics":[],"output":{"kind":"value","value":{"type":"record","value":{"n":{"type":"int","value":9223372036854775807},"status":{"type":"int","value":3},"x":{"type":"decimal","value":"1.5"},"y":{"type":"list","value":[{"type":"int","value":1},{"type":"int","value":2}]},"z":{"type":"string","value":"q"}}}},"status":{"code":3,"kind":"exited"}}}}"##,
    ),
    (
        20,
        r##"{"kind":"response","response":{"version":1,"id":21,"ok":true,"result":2}}"##,
    ),
];

#[test]
fn success_results_keep_their_exact_bytes() {
    let grants = [
        "prompt.register",
        "completion.register",
        "commands.register",
        "events.observe",
        "extension.contribute",
        "catalog.register",
        "ui.panel",
        "output.read",
        "plan.rewrite",
        "environment.mutate",
        "execution.block",
    ];
    let mut input = vec![frame(
        &json!({"kind": "request", "request": {"version": 1, "id": 1,
        "operation": {"operation": "initialize", "protocol_descriptor": LUA_WORKER_PROTOCOL_DESCRIPTOR,
            "policy": {"allow_process": false, "memory_limit_bytes": 33_554_432,
                       "instruction_limit": 10_000_000, "wall_time_ms": 5_000},
            "grants": grants, "process_enabled": false}}}),
    )];
    let operations: Vec<Value> = serde_json::from_str(OPERATIONS).unwrap();
    for (index, operation) in operations.iter().enumerate() {
        input.push(frame(&json!({"kind": "request", "request": {"version": 1,
            "id": index + 2, "operation": operation}})));
    }
    let sink = Sink::default();
    let ending = serve(
        Cursor::new(input.concat()),
        sink.clone(),
        ServeOptions::default(),
    );
    assert!(matches!(ending, Ok(Ending::EndOfInput)), "{ending:?}");
    let raw = sink.0.lock().unwrap().clone();
    let mut payloads = Vec::new();
    let mut rest = raw.as_slice();
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        payloads.push(String::from_utf8(rest[4..4 + len].to_vec()).unwrap());
        rest = &rest[4 + len..];
    }
    assert_eq!(payloads.len(), operations.len() + 1);
    for (index, expected) in EXPECTED {
        assert_eq!(&payloads[*index], expected, "response frame {index}");
    }
}
