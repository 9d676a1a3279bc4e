//! The capability `lua.os` (SPEC §7.1, DESIGN §15.3 "The `lua.os`
//! capability"): `os.date` with every conversion specifier, local and UTC,
//! `os.time` with tables, `os.difftime` and their errors compared with
//! stock Lua 5.4.9 on the same host and time zone; `os.clock` monotonic;
//! `os.getenv` over the declared environment only; `os.exit` ending the
//! script through the runner ABI; the globals with and without the grant;
//! the charge of `os.date`; and the worker binary answering all of it under
//! its lockdown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::process::{RunInput, captured, outcome, run, stock_process, vm_granting};
use common::*;
use quirl_lua_protocol::LUA_WORKER_PROTOCOL_DESCRIPTOR;
use quirl_lua_protocol::records::{ExecutionOutput, ExecutionStatus, StructuredValue};
use quirl_lua_reference_worker::sandbox::capabilities::OS_MEMBERS;
use quirl_lua_reference_worker::sandbox::{GLOBALS, LUA_OS_GRANT, SandboxOptions};
use quirl_lua_reference_worker::{ErrorCode, Verdict};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::process::{Command, Stdio};

const BIG: Budgets = Budgets {
    instruction_limit: 50_000_000,
    ..POLICY
};

fn os_vm() -> quirl_lua_reference_worker::Vm {
    vm_granting(BIG, &[LUA_OS_GRANT])
}

/// Stock Lua 5.4.9's result of `source` (what it returns, as text).
fn reference(source: &str) -> String {
    quirl_lua_testkit::stock::run(source, "=eval")
        .unwrap_or_else(|e| panic!("the reference runs {source}: {e}"))
}

#[track_caller]
fn assert_as_stock(source: &str) {
    let expected = reference(source);
    let actual = success(eval(&mut os_vm(), source));
    assert_eq!(actual, json!(expected), "{source}");
}

/// Every conversion specifier `os.date` accepts (loslib.c's C99 list).
const SPECIFIERS: &[&str] = &[
    "a", "A", "b", "B", "c", "C", "d", "D", "e", "F", "g", "G", "h", "H", "I", "j", "m", "M", "n",
    "p", "r", "R", "S", "t", "T", "u", "U", "V", "w", "W", "x", "X", "y", "Y", "z", "Z", "%", "Ec",
    "EC", "Ex", "EX", "Ey", "EY", "Od", "Oe", "OH", "OI", "Om", "OM", "OS", "Ou", "OU", "OV", "Ow",
    "OW", "Oy",
];

/// Times around the year, the epoch, before it and past 2038.
const TIMES: &[i64] = &[
    0,
    1_000_000_000,
    1_700_000_000,
    1_720_000_000,
    -31_536_000,
    2_200_000_000,
    951_782_400,
];

/// A program that formats every time with every specifier (local and
/// `!`), and `*t`/`!*t` tables as text.
fn date_program() -> String {
    let specifiers = SPECIFIERS
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let times = TIMES
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "local out = {{}}
         local function show(t)
           local p = {{}}
           for _, k in ipairs({{'year', 'month', 'day', 'hour', 'min', 'sec', 'wday', 'yday', 'isdst'}}) do
             p[#p + 1] = k .. '=' .. tostring(t[k])
           end
           return table.concat(p, ',')
         end
         for _, t in ipairs({{{times}}}) do
           for _, s in ipairs({{{specifiers}}}) do
             out[#out + 1] = t .. ' %' .. s .. ' [' .. os.date('%' .. s, t) .. '] [' .. os.date('!%' .. s, t) .. ']'
           end
           out[#out + 1] = show(os.date('*t', t)) .. ' ' .. show(os.date('!*t', t))
           out[#out + 1] = os.date('!%Y-%m-%dT%H:%M:%S and 100%% literal text', t)
         end
         out[#out + 1] = os.date('!', 0) .. '|' .. os.date('', 0) .. '|' .. os.date('!%c', 0)
         return table.concat(out, '\\n')"
    )
}

#[test]
fn os_date_matches_stock_lua_for_every_conversion_specifier_local_and_utc() {
    let program = date_program();
    let expected = reference(&program);
    assert!(expected.contains("0 %Y [1970] [1970]"), "{expected}");
    let actual = success(eval(&mut os_vm(), &program));
    let actual = actual.as_str().unwrap();
    for (line, (ours, lua)) in actual.lines().zip(expected.lines()).enumerate() {
        assert_eq!(ours, lua, "line {line}");
    }
    assert_eq!(actual, expected);
}

#[test]
fn os_date_refuses_bad_formats_with_lua_s_errors() {
    assert_as_stock(
        "local out = {}
         for _, f in ipairs({'%', '%Ez', '%E', '%O', '%Q', '%5d', 'ok %', '!%', '%Oz', '%#c', '*x'}) do
           local ok, e = pcall(os.date, f, 0)
           out[#out + 1] = tostring(ok) .. ' ' .. tostring(e)
         end
         out[#out + 1] = select(2, pcall(os.date, '%c', 'x'))
         out[#out + 1] = select(2, pcall(os.date, '%c', 1.5))
         out[#out + 1] = select(2, pcall(os.date, {}))
         return table.concat(out, '\\n')",
    );
}

#[test]
fn os_time_round_trips_with_tables_as_in_stock_lua() {
    assert_as_stock(
        "local out = {}
         local function show(t)
           local p = {}
           for _, k in ipairs({'year', 'month', 'day', 'hour', 'min', 'sec', 'wday', 'yday', 'isdst'}) do
             p[#p + 1] = k .. '=' .. tostring(t[k])
           end
           return table.concat(p, ',')
         end
         for _, t in ipairs({
           {year = 2024, month = 2, day = 29, hour = 12},
           {year = 2023, month = 14, day = 35, hour = -5, min = 70, sec = -1},
           {year = 2024, month = 7, day = 1, hour = 2, isdst = true},
           {year = 2024, month = 1, day = 15, hour = 2, isdst = false},
           {year = 1970, month = 1, day = 1, hour = 0},
           {year = 2038, month = 1, day = 19, hour = 3, min = 14, sec = 8},
           {year = 1901, month = 12, day = 14},
           {year = '2020', month = '3', day = 1.0},
         }) do
           local time = os.time(t)
           out[#out + 1] = tostring(time) .. ' ' .. show(t)
           out[#out + 1] = show(os.date('*t', time)) .. ' ' .. show(os.date('!*t', time))
           out[#out + 1] = tostring(os.time(os.date('*t', time)) == time)
         end
         for _, t in ipairs({{year = 2020}, {year = 2020, month = 1}, {year = 'x', month = 1, day = 1},
                             {year = 2^40, month = 1, day = 1}, {year = 2020, month = 2^40, day = 1},
                             {year = 2020, month = 1, day = 1.5}, 'now'}) do
           out[#out + 1] = select(2, pcall(os.time, t))
         end
         out[#out + 1] = math.type(os.time()) .. ' ' .. os.difftime(10, 4) .. ' ' .. os.difftime(0, 2^31)
           .. ' ' .. math.type(os.difftime(5, 5)) .. ' ' .. select(2, pcall(os.difftime, 1))
         return table.concat(out, '\\n')",
    );
}

#[test]
fn os_time_is_the_host_s_real_time_and_os_clock_is_monotonic() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let value = success(eval(
        &mut os_vm(),
        "local first = os.clock() local last, ok = first, true
         for i = 1, 2000 do
           local c = os.clock()
           if c < last then ok = false end
           last = c
           for j = 1, 200 do end
         end
         return {time = os.time(), ok = ok, advanced = last > first, type = math.type(first)}",
    ));
    let time = value["time"].as_u64().unwrap();
    assert!(time.abs_diff(now) <= 60, "{time} against {now}");
    assert_eq!(value["ok"], json!(true));
    assert_eq!(value["advanced"], json!(true));
    assert_eq!(value["type"], json!("float"));
}

#[test]
fn os_date_is_charged_per_conversion() {
    // DESIGN §15.6-b: 10,000 conversions make at most 20,000 bytes (about
    // 300 units of allocation) but cost 10,000 strftime calls.
    let budget = Budgets {
        instruction_limit: 30_000,
        ..POLICY
    };
    let mut vm = vm_granting(budget, &[LUA_OS_GRANT]);
    assert_eq!(
        success(eval(&mut vm, "return #os.date(string.rep('%d', 1000), 0)")),
        json!(2000)
    );
    assert_eq!(
        tripped(eval(
            &mut vm,
            "local f = string.rep('%d', 10000) return #os.date(f, 0)"
        )),
        "instructions"
    );
}

#[test]
fn the_clock_and_mktime_are_charged_per_call() {
    // DESIGN §15.6-b: `os.clock` is a system call and `os.time` with a
    // table runs `mktime`; each call is charged beyond its instruction.
    for (source, per_call) in [
        ("for i = 1, 1000 do os.clock() end", 8),
        (
            "local t = {year = 2024, month = 7, day = 1} for i = 1, 1000 do os.time(t) end",
            32,
        ),
    ] {
        let mut vm = os_vm();
        success(eval(&mut vm, source));
        let used = vm.meter().used_units();
        assert!(used >= 1000 * per_call, "{source}: {used} units");
        assert!(used < 1000 * (per_call + 40), "{source}: {used} units");
    }
}

#[test]
fn os_getenv_sees_only_the_declared_environment() {
    let mut vm = os_vm();
    let program = "return {a = os.getenv('NAME'), b = os.getenv('HOME'), c = os.getenv('PATH'),
                           d = os.getenv(''), e = tostring(os.getenv('MISSING'))}";
    let input = RunInput {
        environment: [
            ("NAME".to_owned(), "Ada".to_owned()),
            ("HOME".to_owned(), "/home/q".to_owned()),
        ]
        .into(),
        ..RunInput::default()
    };
    let outcome = outcome(run(&mut vm, program, &input));
    let ExecutionOutput::Value { value } = outcome.output else {
        panic!("{outcome:?}")
    };
    let StructuredValue::Record(record) = value else {
        panic!("{value:?}")
    };
    let get = |key: &str| {
        record
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(get("a"), Some(StructuredValue::String("Ada".to_owned())));
    assert_eq!(
        get("b"),
        Some(StructuredValue::String("/home/q".to_owned()))
    );
    assert_eq!(get("c"), None, "the worker's own PATH is not visible");
    assert_eq!(get("e"), Some(StructuredValue::String("nil".to_owned())));
    // Without a runner context nothing is declared, the worker's own
    // environment included.
    assert_eq!(
        success(eval(
            &mut vm,
            "return {os.getenv('NAME'), os.getenv('HOME'), os.getenv('PATH'), n = 0}"
        )),
        json!({"n": 0})
    );
    // Lua's argument check: a number is a name, anything else an error.
    assert_as_stock(
        "return tostring(os.getenv(42)) .. ' ' .. select(2, pcall(os.getenv)) .. ' | ' .. select(2, pcall(os.getenv, {}))",
    );
}

#[test]
fn os_exit_ends_the_script_with_its_status_through_the_runner_abi() {
    for (call, status) in [
        ("os.exit(3)", 3),
        ("os.exit(0)", 0),
        ("os.exit()", 0),
        ("os.exit(true)", 0),
        ("os.exit(false)", 1),
        ("os.exit(-1)", -1),
        ("os.exit(256 + 7, true)", 263),
        ("os.exit(2^32 + 5)", 5),
    ] {
        let mut vm = os_vm();
        let program = format!(
            "after = false
             local closed = setmetatable({{}}, {{__close = function() after = 'closed' end}})
             do local c <close> = closed
               pcall(function() {call} end)
               after = 'caught'
             end
             after = 'continued'
             return {{abi_version = 1, main = function() return {{abi_version = 1, ok = true, status = 99,
               output = {{kind = 'value', value = {{type = 'nothing'}}}}}} end}}"
        );
        let outcome = outcome(run(&mut vm, &program, &RunInput::default()));
        assert_eq!(outcome.status, ExecutionStatus::Exited(status), "{call}");
        assert_eq!(
            outcome.output,
            ExecutionOutput::Value {
                value: StructuredValue::Nothing
            },
            "{call}"
        );
        // Nothing ran after the exit, not even the __close handler, and
        // the VM goes on serving.
        assert_eq!(
            success(eval(&mut vm, "return tostring(after)")),
            json!("false"),
            "{call}"
        );
    }
    // From `main`, with captured output: the status and what it wrote.
    let mut vm = vm_granting(BIG, &[LUA_OS_GRANT, "lua.io"]);
    let input = RunInput {
        capture: Some(1024),
        ..RunInput::default()
    };
    assert_eq!(
        captured(run(
            &mut vm,
            "return {abi_version = 1, main = function() io.write('partial ') print('out') os.exit(7) end}",
            &input
        )),
        (7, "partial out\n".to_owned(), String::new())
    );
    // Stock Lua exits with the same status and output.
    let (status, stdout, _) =
        stock_process("io.write('partial ') print('out') os.exit(7)", b"", true);
    assert_eq!((status, stdout.as_str()), (7, "partial out\n"));
}

#[test]
fn os_exit_outside_the_runner_abi_ends_the_request_as_an_error_with_the_status() {
    let mut vm = os_vm();
    let error = failure(eval(&mut vm, "pcall(os.exit, 4) return 'not reached'"));
    assert_eq!(error.code, ErrorCode::Lua);
    assert_eq!(error.exit_status, Some(4));
    assert!(error.message.contains("os.exit(4)"), "{error:?}");
    // The stop of the exit is lifted: the next request runs.
    assert_eq!(success(eval(&mut vm, "return 1 + 1")), json!(2));
    // Lua's argument check comes first.
    let error = failure(eval(&mut vm, "os.exit('x')"));
    assert!(
        error
            .message
            .contains("bad argument #1 to 'exit' (number expected, got string)"),
        "{error:?}"
    );
    assert_eq!(error.exit_status, None);
}

#[test]
fn the_grant_adds_exactly_os_and_its_six_functions() {
    let mut vm = os_vm();
    let globals = success(eval(
        &mut vm,
        "local t = {} for k in pairs(_G) do t[#t + 1] = k end table.sort(t) return t",
    ));
    let expected = SandboxOptions::from_grants([LUA_OS_GRANT]).globals();
    assert_eq!(globals, json!(expected));
    let mut plain: Vec<&str> = GLOBALS.to_vec();
    plain.push("os");
    plain.sort_unstable();
    assert_eq!(globals, json!(plain));
    let members = success(eval(
        &mut vm,
        "local t = {} for k in pairs(os) do t[#t + 1] = k end table.sort(t) return t",
    ));
    assert_eq!(members, json!(OS_MEMBERS));
    assert_eq!(
        success(eval(
            &mut vm,
            "return type(os.execute) .. type(os.remove) .. type(os.rename) .. type(os.tmpname) \
             .. type(os.setlocale) .. type(io) .. type(print) .. type(load)"
        )),
        json!("nilnilnilnilnilnilnilnil")
    );
}

#[test]
fn without_the_grant_there_is_no_os() {
    for grants in [
        vec![],
        vec!["lua.load"],
        vec!["lua.io"],
        vec!["lua.OS", "os", "lua.os "],
    ] {
        let mut vm = vm_granting(POLICY, &grants);
        assert_eq!(
            success(eval(&mut vm, "return type(os)")),
            json!("nil"),
            "{grants:?}"
        );
    }
    assert_eq!(success(eval(&mut vm(), "return type(os)")), json!("nil"));
}

/// A frame of `value`.
fn frame(value: &Value) -> Vec<u8> {
    let payload = serde_json::to_vec(value).unwrap();
    let mut out = u32::try_from(payload.len()).unwrap().to_be_bytes().to_vec();
    out.extend(payload);
    out
}

/// The worker binary, initialized with `lua.os` and run with `env` (and
/// nothing else of this process's environment), answers every `eval` of
/// `sources` (under its lockdown, DESIGN §18.3); the results.
fn worker_evals(env: &[(&str, &str)], sources: &[&str]) -> Vec<Value> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_quirl-worker"))
        .arg("--internal-lua-worker-v1")
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = frame(
        &json!({"kind": "request", "request": {"version": 1, "id": 1,
        "operation": {"operation": "initialize", "protocol_descriptor": LUA_WORKER_PROTOCOL_DESCRIPTOR,
        "policy": {"allow_process": false, "memory_limit_bytes": 8_388_608,
                   "instruction_limit": 2_000_000, "wall_time_ms": 5_000},
        "grants": ["lua.os"], "process_enabled": false}}}),
    );
    for (i, source) in sources.iter().enumerate() {
        input.extend(frame(
            &json!({"kind": "request", "request": {"version": 1, "id": i + 2,
            "operation": {"operation": "eval", "source": source}}}),
        ));
    }
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let mut output = Vec::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut output)
        .unwrap();
    let status = child.wait().unwrap();
    let mut answers = Vec::new();
    let mut rest = output.as_slice();
    while rest.len() >= 4 {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let answer: Value = serde_json::from_slice(&rest[4..4 + len]).unwrap();
        answers.push(answer["response"].clone());
        rest = &rest[4 + len..];
    }
    assert_eq!(
        status.code(),
        Some(0),
        "the worker exited {status:?} after {answers:?}"
    );
    assert_eq!(answers.len(), sources.len() + 1, "{answers:?}");
    answers[1..].iter().map(|a| a["result"].clone()).collect()
}

/// Stock Lua with `env` only.
fn stock_with_env(env: &[(&str, &str)], source: &str) -> String {
    let file = quirl_lua_testkit::stock::SourceFile::new(source).unwrap();
    let output = Command::new(quirl_lua_testkit::stock::path())
        .arg(file.path())
        .arg("=eval")
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .trim_end_matches('\n')
        .to_owned()
}

#[test]
fn the_worker_binary_answers_dates_times_and_clocks_under_its_lockdown() {
    // DESIGN §18.3: the seccomp filter kills any system call off its list;
    // the time zone is loaded before it and `TZ` pinned, so `os.date`,
    // `os.time` with a table (`mktime`) and `os.clock` make none.
    let sources = [
        "return os.date('%c %Z %z', 1720000000) .. '|' .. os.date('!%c', 0)",
        "return os.time({year = 2024, month = 7, day = 1, hour = 12}) .. ' ' .. os.time({year = 2024, month = 1, day = 1, hour = 12})",
        "local t = os.date('*t', 1000000000) return t.hour .. ':' .. t.min .. ' ' .. tostring(t.isdst)",
        "return math.type(os.clock()) .. ' ' .. tostring(os.time() > 1700000000)",
    ];
    let berlin = std::path::Path::new("/usr/share/zoneinfo/Europe/Berlin").exists();
    let mut envs: Vec<Vec<(&str, &str)>> = vec![vec![]];
    if berlin {
        envs.push(vec![("TZ", "Europe/Berlin")]);
    } else {
        println!("no /usr/share/zoneinfo/Europe/Berlin: only the default zone is checked");
    }
    envs.push(vec![("TZ", "UTC0")]);
    for env in envs {
        let results = worker_evals(&env, &sources);
        for (source, result) in sources.iter().zip(&results) {
            let expected = stock_with_env(&env, source);
            assert_eq!(result, &json!(expected), "{env:?}: {source}");
        }
    }
}

#[test]
fn a_granted_vm_that_never_uses_os_answers_as_before() {
    // The grant changes the globals only: plain programs run alike.
    let mut granted = os_vm();
    let mut plain = vm_with(BIG);
    for source in [
        "return 6 * 7",
        "local t = {} for i = 1, 10 do t[i] = i * i end return t",
        "return select(2, pcall(error, 'x'))",
    ] {
        let a = eval(&mut granted, source);
        let b = eval(&mut plain, source);
        match (a, b) {
            (Verdict::Success(a), Verdict::Success(b)) => assert_eq!(a, b, "{source}"),
            other => panic!("{source}: {other:?}"),
        }
    }
}
