//! `quirl-lua` feeds scripts real input and reaches every operation
//! (DESIGN §17.5), checked through the README's own examples: the files the
//! README writes are taken from its text, every command below appears in
//! the README verbatim with the output it shows, and running it with the
//! real worker gives that output and exit status.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

const CLI: &str = env!("CARGO_BIN_EXE_quirl-lua");
const README: &str = include_str!("../../../README.md");
const GRANTS: &[&str] = &[
    "--grant",
    "extension.contribute",
    "--grant",
    "catalog.register",
    "--grant",
    "commands.register",
];

/// The body of `cat > NAME <<'LUA' … LUA` in the README.
fn heredoc(name: &str) -> String {
    let start = format!("cat > {name} <<'LUA'\n");
    let at = README
        .find(&start)
        .unwrap_or_else(|| panic!("README writes no {name}"))
        + start.len();
    let end = README[at..].find("\nLUA\n").unwrap();
    format!("{}\n", &README[at..at + end])
}

/// The file `echo 'TEXT' > NAME` in the README writes.
fn echoed(name: &str) -> String {
    let line = README
        .lines()
        .find(|line| line.starts_with("echo '") && line.ends_with(&format!("' > {name}")))
        .unwrap_or_else(|| panic!("README writes no {name}"));
    let text = &line["echo '".len()..line.len() - format!("' > {name}").len()];
    format!("{text}\n")
}

fn scratch() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "quirl-lua-cli-input-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("echo.lua"), heredoc("echo.lua")).unwrap();
    std::fs::write(dir.join("tools.lua"), heredoc("tools.lua")).unwrap();
    std::fs::write(dir.join("config.lua"), echoed("config.lua")).unwrap();
    dir
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn quirl_lua(dir: &Path, args: &[&str], stdin: &[u8]) -> Run {
    let mut child = Command::new(CLI)
        .args(args)
        .current_dir(dir)
        .env_remove("QUIRL_LUA_WORKER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let output = child.wait_with_output().unwrap();
    Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// `shown` as the README prints it (`# …` lines; `…` elides text).
fn matches(shown: &str, actual: &str) -> bool {
    let mut rest = actual;
    let mut parts = shown.split('…');
    let first = parts.next().unwrap_or_default();
    let Some(after) = rest.strip_prefix(first) else {
        return false;
    };
    rest = after;
    let parts: Vec<&str> = parts.collect();
    for (index, part) in parts.iter().enumerate() {
        if index + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Assert the README shows `command` followed by `outputs` (as `# ` lines).
fn shown_in_readme(command: &str, outputs: &[&str]) {
    let mut expected = command.to_owned();
    for line in outputs {
        expected.push_str("\n# ");
        expected.push_str(line);
    }
    assert!(
        README.contains(&expected),
        "README.md does not show:\n{expected}"
    );
}

fn check(dir: &Path, readme_command: &str, args: &[&str], stdin: &[u8], shown: &[&str], code: i32) {
    let run = quirl_lua(dir, args, stdin);
    assert_eq!(run.code, Some(code), "{readme_command}: {}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), shown.len(), "{readme_command}: {}", run.stdout);
    for (shown, line) in shown.iter().zip(&lines) {
        let shown = shown.split("   (exit status").next().unwrap_or_default();
        assert!(
            matches(shown, line),
            "{readme_command}:\n  README: {shown}\n  actual: {line}"
        );
    }
}

#[test]
fn run_feeds_stdin_and_environment_and_exits_with_the_scripts_status() {
    let dir = scratch();
    let cases: [(&str, &[&str], i32); 2] = [
        (
            "printf 'hi' | quirl-lua run echo.lua --stdin --env NAME=Ada",
            &[
                r#"{"cleanup":"complete","diagnostics":[],"output":{"kind":"value","value":{"type":"string","value":"hi Ada"}},"status":{"code":0,"kind":"exited"}}"#,
            ],
            0,
        ),
        (
            "printf 'hi' | quirl-lua run echo.lua --stdin --env NAME=Ada --env STATUS=7",
            &[
                r#"{"cleanup":"complete","diagnostics":[],"output":{"kind":"value","value":{"type":"string","value":"hi Ada"}},"status":{"code":7,"kind":"exited"}}   (exit status 7)"#,
            ],
            7,
        ),
    ];
    for (command, shown, code) in cases {
        shown_in_readme(command, shown);
        let args: Vec<&str> = command
            .split(" | quirl-lua ")
            .nth(1)
            .unwrap()
            .split(' ')
            .collect();
        check(&dir, command, &args, b"hi", shown, code);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn config_and_plugin_contribution_and_command_are_reachable() {
    let dir = scratch();
    let config = "quirl-lua config config.lua";
    let shown = [
        r#"{"completion":{"auto":true,"min_chars":1},…,"ui":{"statusline":{"hints":true},"surface":"auto","theme":"nord","themes":{}}}"#,
    ];
    shown_in_readme(config, &shown);
    check(&dir, config, &["config", "config.lua"], b"", &shown, 0);

    let contribution = "quirl-lua $GRANTS plugin tools.lua --contribution tools";
    let shown = [r#"[{"name":"deploy"}]"#];
    shown_in_readme(contribution, &shown);
    let args = [GRANTS, &["plugin", "tools.lua", "--contribution", "tools"]].concat();
    check(&dir, contribution, &args, b"", &shown, 0);

    let command = "quirl-lua $GRANTS plugin tools.lua --command greet --env NAME=Ada";
    let shown = [
        r#"{"cleanup":"complete","diagnostics":[],"output":{"kind":"value","value":{"type":"string","value":"hello Ada"}},"status":{"code":0,"kind":"exited"}}"#,
    ];
    shown_in_readme(command, &shown);
    let args = [
        GRANTS,
        &[
            "plugin",
            "tools.lua",
            "--command",
            "greet",
            "--env",
            "NAME=Ada",
        ],
    ]
    .concat();
    check(&dir, command, &args, b"", &shown, 0);
    assert!(
        README.contains(&format!("GRANTS=\"{}\"", GRANTS.join(" "))),
        "README's $GRANTS differs"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn batch_lines_reach_config_contribution_and_command() {
    let dir = scratch();
    let lines = [
        r#"{"op":"config","file":"config.lua"}"#,
        r#"{"op":"contribution","kind":"catalog","name":"tools"}"#,
        r#"{"op":"command","name":"greet","env":{"NAME":"Bo"}}"#,
    ];
    let command = format!(
        "printf '%s\\n' '{}' | quirl-lua $GRANTS batch --plugin tools.lua",
        lines.join("' '")
    );
    let shown = [
        r#"{"ok":true,"result":{"completion":{"auto":true,"min_chars":1},…}}"#,
        r#"{"ok":true,"result":[{"name":"deploy"}]}"#,
        r#"{"ok":true,"result":{"cleanup":"complete","diagnostics":[],"output":{"kind":"value","value":{"type":"string","value":"hello Bo"}},"status":{"code":0,"kind":"exited"}}}"#,
    ];
    shown_in_readme(&command, &shown);
    let args = [GRANTS, &["batch", "--plugin", "tools.lua"]].concat();
    let stdin = format!("{}\n", lines.join("\n"));
    check(&dir, &command, &args, stdin.as_bytes(), &shown, 0);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn input_json_becomes_a_structured_value_and_statuses_map_to_exit_codes() {
    let dir = scratch();
    std::fs::write(
        dir.join("show.lua"),
        "return { abi_version = 1, main = function(ctx)
           local c = ctx.input.content
           local text = ctx.input.kind .. ':' .. c.type .. ':' .. c.value.list.value[2].value
             .. ':' .. table.concat(ctx.args, ',')
           local n = 0 for _ in pairs(ctx.env) do n = n + 1 end
           return { abi_version = 1, ok = true, status = tonumber(ctx.args[1]),
                    output = { kind = 'value', value = { type = 'string', value = text .. ':' .. n } } }
         end }",
    )
    .unwrap();
    let run = quirl_lua(
        &dir,
        &[
            "--json",
            "run",
            "show.lua",
            "--input-json",
            r#"{"list":[1,"two"]}"#,
            "0",
            "--x",
        ],
        b"",
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stdout.starts_with(r#"{"ok":true,"result":"#),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(r#""value":"value:record:two:0,--x:0""#),
        "{}",
        run.stdout
    );
    for (status, code) in [("3", 3), ("255", 255), ("256", 255), ("-1", 255)] {
        let run = quirl_lua(
            &dir,
            &[
                "run",
                "show.lua",
                "--input-json",
                r#"{"list":[0,"x"]}"#,
                status,
            ],
            b"",
        );
        assert_eq!(run.code, Some(code), "status {status}: {}", run.stderr);
    }
    // Usage errors: both inputs, a malformed --env, input options without --command.
    for args in [
        &["run", "show.lua", "--stdin", "--input-json", "1"][..],
        &["run", "show.lua", "--env", "NOVALUE"],
        &["run", "show.lua", "--input-json", "{"],
        &["plugin", "tools.lua", "--env", "A=b"],
    ] {
        let run = quirl_lua(&dir, args, b"");
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
    }
    // Standard input beyond the 8 MiB execution input bound is refused.
    let big = vec![b'x'; 8 * 1024 * 1024 + 1];
    let run = quirl_lua(
        &dir,
        &["run", "echo.lua", "--stdin", "--env", "NAME=x"],
        &big,
    );
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("larger than"), "{}", run.stderr);
    std::fs::remove_dir_all(dir).unwrap();
}
