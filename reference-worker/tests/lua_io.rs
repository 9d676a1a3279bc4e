//! The capability `lua.io` (SPEC §7.1, DESIGN §15.3 "The `lua.io`
//! capability"): `print`, `io.write` and the standard files' `write` in
//! program order into the captured output, `io.read` and `lines` with every
//! format over the runner's stdin, each compared with stock Lua 5.4.9 run as
//! a process with the same stdin; files and processes refused with Lua's
//! own shapes; the capture bound; the runner ABI's output targets; the
//! globals with and without the grant.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::process::{RunInput, captured, outcome, run, stock_process, vm_granting};
use common::*;
use quirl_lua_protocol::records::{ExecutionOutput, StructuredValue};
use quirl_lua_reference_worker::sandbox::capabilities::IO_MEMBERS;
use quirl_lua_reference_worker::sandbox::{LUA_IO_GRANT, SandboxOptions};
use quirl_lua_reference_worker::{ErrorCode, Verdict};
use serde_json::json;

const BIG: Budgets = Budgets {
    instruction_limit: 50_000_000,
    memory_limit_bytes: 32 * 1024 * 1024,
    ..POLICY
};

fn io_vm() -> quirl_lua_reference_worker::Vm {
    vm_granting(BIG, &[LUA_IO_GRANT])
}

/// Run `script` (a plain script returning nothing) in the sandbox with
/// `stdin` and captured output, and in stock Lua as a process fed the same
/// stdin; both must print the same.
#[track_caller]
fn assert_prints_as_stock(script: &str, stdin: &[u8]) {
    let (status, stdout, stderr) = stock_process(script, stdin, false);
    assert_eq!(status, 0, "stock Lua failed on {script}: {stderr}");
    let input = RunInput {
        stdin: Some(stdin.to_vec()),
        capture: Some(1024 * 1024),
        ..RunInput::default()
    };
    let ours = captured(run(&mut io_vm(), script, &input));
    assert_eq!(ours, (0, stdout, stderr), "{script}");
}

#[test]
fn io_write_mixed_with_print_keeps_program_order() {
    assert_prints_as_stock(
        "io.write('a', 1, ' ', 2.5, ' ', -0.0, ' ', 1e100, ' ', 2^63, ' ', 10 // 3, ' ', 1/0, ' ', 3.0, '\\n')
         print('b', nil, true, 1.0, 2^53, math.mininteger)
         io.stdout:write('c'):write('d', '\\n')
         print()
         io.write()
         print(('x'):rep(3), {} ~= nil)
         local f = io.write('e') print(f == io.stdout, io.type(f))
         io.stderr:write('to stderr\\n')
         io.write(string.format('%5.2f|%q', math.pi, 'quo\"te'), '\\n')",
        b"",
    );
}

#[test]
fn io_read_formats_read_stdin_as_stock_lua_reads_it() {
    let stdin = b"first line\nsecond line\n  42  -3.5e2 0x1F 1e  nope\nx\n\nrest of\nthe input";
    assert_prints_as_stock(
        "local function show(...)
           local out = {}
           for i = 1, select('#', ...) do out[i] = string.format('%q', (select(i, ...))) end
           print(select('#', ...), table.concat(out, ' '))
         end
         show(io.read())
         show(io.read('L'))
         show(io.read('n', 'n', '*n'))
         show(io.read('n'))
         show(io.read(4))
         show(io.read('l', 'l'))
         show(io.read(0))
         show(io.read(3, 'L'))
         show(io.read('a'))
         show(io.read('a'))
         show(io.read(0))
         show(io.read('l'))
         show(io.read('L'))
         show(io.read(5))
         show(io.read('n'))",
        stdin,
    );
    // Counts, whole reads and numerals at every edge.
    assert_prints_as_stock(
        "print(io.read(1), io.read(0), io.read('*l'), io.read('*a'))",
        b"abc\ndef",
    );
    assert_prints_as_stock(
        "for _ = 1, 12 do print(io.read('n'), io.read(1)) end",
        b"1 2.5 -.5 +7 0x 0xAp-1 1e+ .e1 12345678901234567890 9.9e999 -0 \t\n 3",
    );
    assert_prints_as_stock("print(io.read('a'), io.read('a'), io.read('l'))", b"");
}

#[test]
fn lines_iterate_stdin_as_stock_lua_does() {
    let stdin = b"one\ntwo\n\nthree\nlast without newline";
    assert_prints_as_stock(
        "for line in io.lines() do print('[' .. line .. ']') end",
        stdin,
    );
    assert_prints_as_stock(
        "for line in io.stdin:lines('L') do io.write('<', line, '>') end",
        stdin,
    );
    assert_prints_as_stock(
        "for a, b in io.lines(nil, 1, 'l') do print(a, b) end",
        stdin,
    );
    assert_prints_as_stock(
        "for n in io.lines(nil, 'n') do print(n, math.type(n)) end print(io.read('a'))",
        b"1 2.5 3 x 4",
    );
    assert_prints_as_stock(
        "local it = io.lines() print(it(), it(), it(), it())",
        b"a\nb\n",
    );
}

#[test]
fn library_errors_are_lua_s_own() {
    // Each call's error as stock Lua words it (argument numbers, names,
    // and the caller's position).
    assert_prints_as_stock(
        "for _, f in ipairs({
           function() io.write({}) end,
           function() io.write(1, nil) end,
           function() io.read('x') end,
           function() io.read({}) end,
           function() io.read(1.5) end,
           function() io.stdout:write(print) end,
           function() io.stdin:read('*z') end,
           function() io.stdout:seek('sideways') end,
           function() io.stdout:seek('set', 1.5) end,
           function() io.stdout:setvbuf('maybe') end,
           function() io.stdout:setvbuf() end,
           function() io.type() end,
           function() io.stdout.write(42) end,
           function() io.stdout.read({}) end,
           function() io.lines(nil, {}) () end,
           function() io.lines({}) end,
           function() io.input({}) end,
           function() io.close({}) end,
           function() io.open() end,
           function() io.open('f', 'rw') end,
           function() io.open('f', 'r+b+') end,
           function() io.open('f', {}) end,
           function() io.popen('ls', 'rw') end,
           function() io.popen() end,
           function() io.lines(nil, table.unpack((function() local t = {} for i = 1, 251 do t[i] = 'l' end return t end)())) end,
         }) do
           print(select(2, pcall(f)))
         end",
        b"",
    );
}

#[test]
fn standard_files_behave_as_pipes() {
    assert_prints_as_stock(
        "print(io.stdout:close())
         print(io.close())
         print(io.stderr:close())
         print(io.stdin:seek())
         print(io.stdout:seek('set', 0))
         print(io.stdout:setvbuf('no'), io.stdout:setvbuf('full', 1024), io.stdout:setvbuf('line'))
         print(io.flush(), io.stdout:flush(), io.stdin:flush())
         print(io.type(io.stdin), io.type(io.stdout), io.type(io.stderr), io.type(42), io.type({}))
         print(io.input() == io.stdin, io.output() == io.stdout)
         print(io.stdout:read('l'))
         print(io.stdin:write('x'))
         print(io.read('n'), io.stdin:read('l'))
         do local f <close> = io.stdout end
         print('closed?', io.type(io.stdout))
         print(io.output(io.stderr) == io.stderr, io.write('to stderr\\n') == io.stderr)
         print('still stdout')
         io.output(io.stdout)
         io.input(io.stdout)
         print(io.read('l'))
         print(type(select(2, pcall(io.lines))))",
        b"12 tail\n",
    );
}

#[test]
fn files_and_processes_are_refused_with_nil_and_a_message() {
    let mut vm = io_vm();
    let value = success(eval(
        &mut vm,
        "local function all(...) return {select('#', ...), tostring((...)), select(2, ...)} end
         local open, popen, tmp = all(io.open('/etc/passwd')), all(io.popen('ls', 'r')), all(io.tmpfile())
         local writable = all(io.open('out.txt', 'w'))
         return {open = open, popen = popen, tmp = tmp, writable = writable,
                 lines = select(2, pcall(io.lines, '/etc/passwd')),
                 input = select(2, pcall(io.input, 'in.txt')),
                 output = select(2, pcall(io.output, 'out.txt'))}",
    ));
    assert_eq!(
        value,
        json!({
            "open": [3, "nil", "/etc/passwd: not available in the sandbox", 13],
            "popen": [3, "nil", "ls: not available in the sandbox", 13],
            "tmp": [3, "nil", "not available in the sandbox", 13],
            "writable": [3, "nil", "out.txt: not available in the sandbox", 13],
            "lines": "cannot open file '/etc/passwd' (not available in the sandbox)",
            "input": "cannot open file 'in.txt' (not available in the sandbox)",
            "output": "cannot open file 'out.txt' (not available in the sandbox)",
        })
    );
    // Stock Lua gives the same shapes when the system refuses.
    let (_, stock, _) = stock_process(
        "print(io.open('/nonexistent/x'))
         print(select(2, pcall(io.lines, '/nonexistent/x')))",
        b"",
        false,
    );
    assert_eq!(
        stock,
        "nil\t/nonexistent/x: No such file or directory\t2\n\
         cannot open file '/nonexistent/x' (No such file or directory)\n"
    );
}

#[test]
fn a_file_prints_as_an_object_number_not_an_address() {
    let value = success(eval(
        &mut io_vm(),
        "return {tostring(io.stdout), tostring(io.stdin), tostring(io.stdout) == tostring(io.stdout),
                 string.format('%s', io.stderr)}",
    ));
    let texts: Vec<&str> = value
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(texts.len(), 3, "{value}");
    for text in texts {
        assert!(text.starts_with("FILE*: #"), "{text}");
        assert!(!text.contains("0x"), "{text}");
    }
    assert_eq!(value[2], json!(true));
}

#[test]
fn output_past_the_capture_bound_fails_as_on_a_full_device_and_is_reported() {
    let mut vm = io_vm();
    let input = RunInput {
        capture: Some(10),
        ..RunInput::default()
    };
    let verdict = run(
        &mut vm,
        "local a = {io.write('12345')}
         local b = {io.write('67890', 'abc')}
         local c = {io.write('more')}
         print('dropped')
         io.stderr:write('err')
         return {status = 0, a = a[1] == io.stdout, b = b[2], c = c[3]}",
        &input,
    );
    let outcome = outcome(verdict);
    assert_eq!(
        outcome.output,
        ExecutionOutput::Bytes {
            stdout: b"1234567890".to_vec(),
            stderr: b"err".to_vec()
        }
    );
    assert_eq!(outcome.diagnostics.len(), 1, "{outcome:?}");
    let diagnostic = &outcome.diagnostics[0];
    assert_eq!(diagnostic.code, ErrorCode::ResourceLimit);
    assert!(
        diagnostic.message.contains("standard output"),
        "{diagnostic:?}"
    );
    assert!(diagnostic.context.contains(&"limit: output".to_owned()));
    // What the script saw: success, then "No space left on device" (28).
    let (_, stdout, stderr) = captured(run(
        &mut vm,
        "local a = {io.write(('x'):rep(30))} local b = {io.write(('y'):rep(20))}
         io.stderr:write(tostring(a[1] == io.stdout), ' ', tostring(b[1]), ' ', b[2], ' ', b[3])",
        &RunInput {
            capture: Some(40),
            ..RunInput::default()
        },
    ));
    assert_eq!(stdout, format!("{}{}", "x".repeat(30), "y".repeat(10)));
    assert_eq!(stderr, "true nil No space left on device 28");
}

#[test]
fn the_runner_abi_s_output_targets_decide_where_output_goes() {
    let mut vm = io_vm();
    // `capture` with a v1 module: the status, and what it wrote.
    let v1 = "return {abi_version = 1, main = function(ctx)
                io.write(io.read('a'):upper()) io.stderr:write('done')
                return {abi_version = 1, ok = true, status = 3}
              end}";
    let input = RunInput {
        stdin: Some(b"shout".to_vec()),
        capture: Some(1000),
        ..RunInput::default()
    };
    assert_eq!(
        captured(run(&mut vm, v1, &input)),
        (3, "SHOUT".to_owned(), "done".to_owned())
    );
    // A v1 result with an `output` of its own is refused under `capture`.
    let error = failure(run(
        &mut vm,
        "return {abi_version = 1, main = function() print('x')
           return {abi_version = 1, ok = true, status = 0, output = {kind = 'value', value = {type = 'nothing'}}} end}",
        &input,
    ));
    assert_eq!(error.code, ErrorCode::Validation);
    assert!(
        format!("{error:?}").contains("must not contain `output`"),
        "{error:?}"
    );
    // `value`: the typed value; what was printed is dropped.
    let outcome = outcome(run(
        &mut vm,
        "print('dropped') io.write('dropped') return {abi_version = 1, main = function()
           print('dropped too')
           return {abi_version = 1, ok = true, status = 0, output = {kind = 'value', value = {type = 'int', value = 42}}} end}",
        &RunInput::default(),
    ));
    assert_eq!(
        outcome.output,
        ExecutionOutput::Value {
            value: StructuredValue::Int(42)
        }
    );
    assert!(outcome.diagnostics.is_empty());
    // Without `lua.io`, `capture` stays refused (Quirl's runner ABI rule).
    let mut plain = vm_granting(BIG, &["lua.os"]);
    let error = failure(run(&mut plain, "return {status = 0}", &input));
    assert_eq!(error.code, ErrorCode::Validation);
    assert!(
        format!("{error:?}").contains("typed value output only"),
        "{error:?}"
    );
    // Operations without a runner context read an empty stdin.
    assert_eq!(
        success(eval(
            &mut vm,
            "print('nowhere') return {io.read('a'), io.read('l') == nil}"
        )),
        json!(["", true])
    );
}

#[test]
fn a_plain_script_with_captured_output_exits_with_its_status() {
    // The shape of a test framework's runner: print, then a status.
    let mut vm = vm_granting(BIG, &[LUA_IO_GRANT, "lua.os"]);
    let input = RunInput {
        capture: Some(4096),
        ..RunInput::default()
    };
    let script = "local failures = 0
        for i, case in ipairs({true, false, true}) do
          print(string.format('test %d: %s', i, case and 'ok' or 'FAILED'))
          if not case then failures = failures + 1 end
        end
        io.stderr:write(failures, ' failure(s)\\n')
        os.exit(failures == 0)";
    let ours = captured(run(&mut vm, script, &input));
    let stock = stock_process(script, b"", true);
    assert_eq!(ours, stock);
    assert_eq!(ours.0, 1);
}

#[test]
fn reading_whitespace_is_charged() {
    // DESIGN §15.6-b: `read('n')` skips whitespace without allocating; a
    // megabyte of it costs its charge (16 bytes a unit), not one call.
    let budget = Budgets {
        instruction_limit: 50_000,
        memory_limit_bytes: 32 * 1024 * 1024,
        ..POLICY
    };
    let mut vm = vm_granting(budget, &[LUA_IO_GRANT]);
    let input = RunInput {
        stdin: Some(vec![b' '; 1 << 20]),
        capture: Some(100),
        ..RunInput::default()
    };
    assert_eq!(
        tripped(run(
            &mut vm,
            "local n = io.read('n') return {status = 0}",
            &input
        )),
        "instructions"
    );
}

#[test]
fn each_format_a_lines_iterator_repeats_is_charged() {
    // DESIGN §15.6-b: the iterator pushes and reads its formats (up to 250)
    // inside one call; empty lines allocate nothing.
    let budget = Budgets {
        instruction_limit: 100_000,
        memory_limit_bytes: 32 * 1024 * 1024,
        ..POLICY
    };
    let mut vm = vm_granting(budget, &[LUA_IO_GRANT]);
    let input = RunInput {
        stdin: Some(vec![b'\n'; 1 << 20]),
        capture: Some(100),
        ..RunInput::default()
    };
    let formats = vec!["'l'"; 250].join(", ");
    let source = format!("for a in io.lines(nil, {formats}) do end return {{status = 0}}");
    assert_eq!(tripped(run(&mut vm, &source, &input)), "instructions");
    let units = vm.meter().used_units();
    assert!(units > 100_000, "{units}");
}

#[test]
fn the_grant_adds_exactly_io_and_print() {
    let mut vm = io_vm();
    let globals = success(eval(
        &mut vm,
        "local t = {} for k in pairs(_G) do t[#t + 1] = k end table.sort(t) return t",
    ));
    assert_eq!(
        globals,
        json!(SandboxOptions::from_grants([LUA_IO_GRANT]).globals())
    );
    let members = success(eval(
        &mut vm,
        "local t = {} for k in pairs(io) do t[#t + 1] = k end table.sort(t) return t",
    ));
    assert_eq!(members, json!(IO_MEMBERS));
    assert_eq!(
        success(eval(
            &mut vm,
            "local t = {} for k in pairs(getmetatable(io.stdout).__index) do t[#t + 1] = k end \
             table.sort(t) return {t, type(os), type(load)}"
        )),
        json!([
            quirl_lua_reference_worker::sandbox::capabilities::FILE_METHODS,
            "nil",
            "nil"
        ])
    );
}

#[test]
fn without_the_grant_there_is_no_io_and_no_print() {
    for grants in [
        vec![],
        vec!["lua.load"],
        vec!["lua.os"],
        vec!["lua.IO", "io", "print"],
    ] {
        let mut vm = vm_granting(POLICY, &grants);
        assert_eq!(
            success(eval(&mut vm, "return type(io) .. type(print)")),
            json!("nilnil"),
            "{grants:?}"
        );
    }
    let verdict = eval(&mut vm(), "print('x')");
    assert!(matches!(verdict, Verdict::Failure(_)), "{verdict:?}");
}
