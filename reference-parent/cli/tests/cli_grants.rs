//! `quirl-lua --grant`: a grant the CLI does not know is a usage error with
//! the closest known grant (SPEC §7.1: the worker would silently ignore
//! it), and the sandbox capabilities `lua.os` and `lua.io` through the CLI
//! (DESIGN §15.3): with `lua.io`, `run` prints what the script writes, on
//! this process's standard output and error, and exits with its status.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

use quirl_lua_testkit::scratch::Scratch;

const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");

fn quirl_lua(dir: &Scratch, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(CLI)
        .args(args)
        .current_dir(dir.path())
        .env_remove("QUIRL_LUA_WORKER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn an_unknown_grant_is_a_usage_error_naming_the_closest_known_one() {
    let dir = Scratch::new("grants-unknown");
    for (grant, suggestion) in [
        ("lua.laod", Some("lua.load")),
        ("lua.IO", Some("lua.io")),
        ("prompt.registr", Some("prompt.register")),
        ("bogus", None),
    ] {
        let output = quirl_lua(&dir, &["--grant", grant, "eval", "return 1"], b"");
        assert_eq!(output.status.code(), Some(2), "{grant}: {output:?}");
        assert!(output.stdout.is_empty(), "{grant}: nothing ran");
        let message = text(&output.stderr);
        assert!(
            message.contains(&format!("unknown grant `{grant}`")),
            "{message}"
        );
        match suggestion {
            Some(known) => assert!(
                message.contains(&format!("did you mean `{known}`?")),
                "{message}"
            ),
            None => assert!(!message.contains("did you mean"), "{message}"),
        }
    }
    // Known grants, scoped process grants included, are accepted.
    let output = quirl_lua(
        &dir,
        &[
            "--grant",
            "lua.os",
            "--grant",
            "process.spawn:git",
            "eval",
            "return type(os.time)",
        ],
        b"",
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(text(&output.stdout).trim(), "\"function\"");
}

#[test]
fn with_lua_io_run_prints_what_the_script_writes_and_exits_with_its_status() {
    let dir = Scratch::new("grants-io");
    std::fs::write(
        dir.path().join("cat.lua"),
        "for line in io.lines() do print(line:upper()) end\n\
         io.stderr:write('read ', os.getenv('WHO') or '?', '\\n')\n\
         os.exit(tonumber(os.getenv('CODE')))\n",
    )
    .unwrap();
    let output = quirl_lua(
        &dir,
        &[
            "--grant", "lua.io", "--grant", "lua.os", "run", "cat.lua", "--stdin", "--env",
            "WHO=Ada", "--env", "CODE=5",
        ],
        b"one\ntwo\n",
    );
    assert_eq!(output.status.code(), Some(5), "{output:?}");
    assert_eq!(text(&output.stdout), "ONE\nTWO\n");
    assert_eq!(text(&output.stderr), "read Ada\n");
    // `--json` prints the outcome record instead.
    let output = quirl_lua(
        &dir,
        &[
            "--json", "--grant", "lua.io", "--grant", "lua.os", "run", "cat.lua", "--stdin",
            "--env", "CODE=0",
        ],
        b"x\n",
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let record: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        record["result"]["output"],
        serde_json::json!({"kind": "bytes", "stdout": b"X\n", "stderr": b"read ?\n"})
    );
    // Without `lua.io` there is no `print`: the script fails as before.
    let output = quirl_lua(
        &dir,
        &["--grant", "lua.os", "run", "cat.lua", "--stdin"],
        b"x\n",
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(text(&output.stderr).contains("io"), "{output:?}");
}
