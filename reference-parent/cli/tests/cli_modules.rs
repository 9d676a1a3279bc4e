//! `quirl-lua --grant lua.load … --module NAME=FILE`: Lua modules preloaded
//! from files for `run` and `eval` (DESIGN §15.3 "The `lua.load`
//! capability"), with the built-in worker.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use quirl_lua_testkit::scratch::Scratch;

const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");

fn quirl_lua(dir: &Scratch, args: &[&str]) -> Output {
    Command::new(CLI)
        .args(args)
        .current_dir(dir.path())
        .env_remove("QUIRL_LUA_WORKER")
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// A small JSON encoder, as a vendored library would be, that requires a
/// helper module of its own.
const JSON: &str = r#"local strings = require("strings")
local M = {}
function M.encode(v)
  local t = type(v)
  if t == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = M.encode(x) end
    return "[" .. table.concat(parts, ",") .. "]"
  elseif t == "string" then
    return strings.quote(v)
  elseif t == "number" or t == "boolean" then
    return tostring(v)
  end
  error("cannot encode a " .. t)
end
return M
"#;

const STRINGS: &str = "local M = {}\nfunction M.quote(s) return '\"' .. s:gsub('[\"\\\\]', '\\\\%0') .. '\"' end\nreturn M\n";

const MAIN: &str = r#"local json = require("json")
return {
  abi_version = 1,
  main = function(ctx)
    local text = json.encode({#ctx.args, ctx.args[1], "q\"uote", true})
    return { abi_version = 1, ok = true, status = 0,
             output = { kind = "value", value = { type = "string", value = text } } }
  end,
}
"#;

fn library(test: &str) -> Scratch {
    let dir = Scratch::new(test);
    dir.write("json.lua", JSON);
    dir.write("strings.lua", STRINGS);
    dir.write("main.lua", MAIN);
    dir
}

#[test]
fn run_requires_modules_given_after_the_script() {
    let dir = library("run-modules");
    let output = quirl_lua(
        &dir,
        &[
            "--grant",
            "lua.load",
            "run",
            "main.lua",
            "--module",
            "json=json.lua",
            "--module",
            "strings=strings.lua",
            "one",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let outcome: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        outcome["output"]["value"]["value"],
        serde_json::json!(r#"[1,"one","q\"uote",true]"#),
        "{outcome}"
    );
}

#[test]
fn eval_requires_a_module_and_its_errors_name_the_file() {
    let dir = library("eval-modules");
    let modules = [
        "--grant",
        "lua.load",
        "eval",
        "--module",
        "json=json.lua",
        "--module",
        "strings=strings.lua",
    ];
    let output = quirl_lua(
        &dir,
        &[&modules[..], &["return require('json').encode({'a', 2})"]].concat(),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "\"[\\\"a\\\",2]\"\n");
    // A run-time error inside the module carries the module's file and line.
    let output = quirl_lua(
        &dir,
        &[
            &modules[..],
            &["return require('json').encode({function() end})"],
        ]
        .concat(),
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output)
            .starts_with("error[lua]: Lua runtime error: json.lua:14: cannot encode a function"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_module_that_does_not_compile_fails_before_the_script_runs() {
    let dir = library("bad-module");
    dir.write("bad.lua", "local ok = true\nlocal x = = 1\n");
    dir.write(
        "marker.lua",
        "return {main = function() error('the script ran') end}\n",
    );
    let output = quirl_lua(
        &dir,
        &[
            "--grant",
            "lua.load",
            "run",
            "marker.lua",
            "--module",
            "bad=bad.lua",
        ],
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output)
            .starts_with("error[lua]: Lua runtime error: bad.lua:2: unexpected symbol near '='\n"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn modules_need_the_grant_and_distinct_names() {
    let dir = library("module-usage");
    for (args, message) in [
        (
            &["eval", "return 1", "--module", "json=json.lua"][..],
            "--module needs --grant lua.load",
        ),
        (
            &[
                "--grant",
                "lua.load",
                "eval",
                "return 1",
                "--module",
                "json=json.lua",
                "--module",
                "json=strings.lua",
            ][..],
            "--module json is given more than once",
        ),
        (
            &[
                "--grant",
                "lua.load",
                "eval",
                "return 1",
                "--module",
                "json=missing.lua",
            ][..],
            "cannot read `missing.lua`",
        ),
        (
            &[
                "--grant", "lua.load", "eval", "return 1", "--module", "json",
            ][..],
            "is not NAME=FILE",
        ),
    ] {
        let output = quirl_lua(&dir, args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(message),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn the_grant_alone_keeps_load_and_without_it_load_is_absent() {
    let dir = Scratch::new("load-grant");
    let output = quirl_lua(
        &dir,
        &[
            "--grant",
            "lua.load",
            "eval",
            "return load('return 6 * 7')()",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "42\n");
    let output = quirl_lua(&dir, &["eval", "return load == nil and require == nil"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "true\n");
}

#[test]
fn a_file_that_is_not_utf8_is_refused_with_the_offset_of_its_first_invalid_byte() {
    let dir = Scratch::new("not-utf8");
    let path = dir.path().join("latin1.lua");
    std::fs::write(&path, b"-- ok\nreturn 'caf\xe9'\n").unwrap();
    let hint = "`latin1.lua` is not UTF-8: byte offset 17 (line 2) holds 0xE9, which starts no \
                valid UTF-8 character; Lua sources are text: write such a byte as the escape \
                \\xE9 in a string literal";
    for command in [&["check", "latin1.lua"][..], &["run", "latin1.lua"][..]] {
        let output = quirl_lua(&dir, command);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{command:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(hint),
            "{command:?}: {}",
            stderr(&output)
        );
    }
    // The same for a module file.
    dir.write("main.lua", "return 1\n");
    let output = quirl_lua(
        &dir,
        &[
            "--grant",
            "lua.load",
            "eval",
            "return 1",
            "--module",
            "m=latin1.lua",
        ],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains(hint), "{}", stderr(&output));
}

#[test]
fn module_text_reaches_the_worker_byte_for_byte() {
    let dir = Scratch::new("module-bytes");
    // Quotes, backslashes, a tab, NUL, non-ASCII text and CRLF line ends.
    dir.write(
        "bytes.lua",
        "local s = \"q\\\"b\\\\t\\t\" .. 'é\0' -- \"'\\ \t\r\nreturn {s = s, raw = [[a\tb\"c\\é]]}\r\n",
    );
    dir.write(
        "crlf.lua",
        "local a = 1\r\nlocal b = 2\r\nerror('third line')\r\n",
    );
    let output = quirl_lua(
        &dir,
        &[
            "--grant",
            "lua.load",
            "eval",
            "--module",
            "bytes=bytes.lua",
            "--module",
            "crlf=crlf.lua",
            "local m = require('bytes') local ok, e = pcall(require, 'crlf') \
             return {m.s == 'q\"b\\\\t\\té\\0', m.raw == 'a\\tb\"c\\\\é', e}",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), "[true,true,\"crlf.lua:3: third line\"]\n");
}
