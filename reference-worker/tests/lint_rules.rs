//! The rules of `check`'s lint (DESIGN §15.10), one behaviour per test:
//! what is an error (a certain failure where reached), what is only a
//! warning, where each finding points, and which suggestion it carries.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_reference_worker::lint::{self, Environment, Finding, Rule, Severity};
use std::collections::HashSet;

fn lint_with(source: &str, grants: &[&str]) -> Vec<Finding> {
    let grants: HashSet<String> = grants.iter().map(|g| (*g).to_owned()).collect();
    lint::lint(source, &Environment::for_grants(&grants).unwrap())
}

/// `(rule, severity, the text under the span)` of each finding.
fn short(source: &str, grants: &[&str]) -> Vec<(&'static str, Severity, String)> {
    lint_with(source, grants)
        .iter()
        .map(|f| {
            (
                f.rule.as_str(),
                f.severity,
                source[f.span.start..f.span.end].to_owned(),
            )
        })
        .collect()
}

fn errors(source: &str, grants: &[&str]) -> Vec<(&'static str, String)> {
    short(source, grants)
        .into_iter()
        .filter(|(_, severity, _)| *severity == Severity::Error)
        .map(|(rule, _, text)| (rule, text))
        .collect()
}

fn help_of(source: &str, rule: Rule) -> String {
    lint_with(source, &[])
        .into_iter()
        .find(|f| f.rule == rule)
        .unwrap_or_else(|| panic!("no {} in {source}", rule.as_str()))
        .help
        .join(" | ")
}

const E: Severity = Severity::Error;
const W: Severity = Severity::Warning;

#[test]
fn the_four_problems_of_the_issue_file() {
    let source = "---@parm x number\nlocal function f(x)\n  return quirl.proces.run(\"echo \" .. x)\nend\nprnt(f(1))\nreturn io.open(\"x\")\n";
    let found = lint_with(source, &[]);
    let summary: Vec<(&str, Severity, &str, &str)> = found
        .iter()
        .map(|f| {
            (
                f.rule.as_str(),
                f.severity,
                &source[f.span.start..f.span.end],
                f.help[0].as_str(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("annotation_tag", E, "@parm", "did you mean `---@param`?"),
            (
                "unknown_member",
                E,
                "proces",
                "did you mean `quirl.process`?"
            ),
            (
                "undefined_global",
                E,
                "prnt",
                "did you mean `print`? The grant `lua.io` adds it (`quirl-lua --grant lua.io`, or `lua.io` in initialize's grants)"
            ),
            (
                "absent_facility",
                E,
                "io",
                "the grant `lua.io` adds it (`quirl-lua --grant lua.io`, or `lua.io` in initialize's grants)"
            ),
        ]
    );
    let fixed = "---@param x number\nlocal function f(x)\n  return quirl.process.run(\"echo \" .. x)\nend\nreturn f(1)\n";
    assert_eq!(short(fixed, &[]), Vec::new());
}

#[test]
fn calling_or_indexing_an_undefined_global_is_an_error_reading_it_a_warning() {
    assert_eq!(
        short("prnt('x')", &[]),
        [("undefined_global", E, "prnt".to_owned())]
    );
    assert_eq!(
        short("local t = {} t.x = foo.bar return t", &[]),
        [("undefined_global", E, "foo".to_owned())]
    );
    assert_eq!(
        short("local v = undefined_thing return v", &[]),
        [("undefined_global", W, "undefined_thing".to_owned())]
    );
    assert!(help_of("return tabel.concat({})", Rule::UndefinedGlobal).contains("`table`"));
}

#[test]
fn unknown_members_of_library_tables_are_found_with_a_near_miss() {
    assert_eq!(
        short("return string.fromat('%d', 1)", &[]),
        [("unknown_member", E, "fromat".to_owned())]
    );
    assert!(
        help_of("return string.fromat('%d', 1)", Rule::UnknownMember).contains("string.format")
    );
    assert_eq!(
        short("return math.pie", &[]),
        [("unknown_member", W, "pie".to_owned())]
    );
    assert_eq!(
        short("return quirl.events.subscrib{}", &[]),
        [("unknown_member", E, "subscrib".to_owned())]
    );
    assert_eq!(short("return utf8.charpattern:len()", &[]), []);
    // A table of data (package.loaded) is not a library: any member may exist.
    assert_eq!(short("return package.loaded.json", &["lua.load"]), []);
}

#[test]
fn facilities_the_sandbox_leaves_out_name_the_grant_that_adds_them() {
    assert_eq!(
        short("return load('return 1')()", &[]),
        [("absent_facility", E, "load".to_owned())]
    );
    let help = help_of("return load('return 1')()", Rule::AbsentFacility);
    assert!(help.contains("`lua.load`"), "{help}");
    assert_eq!(short("return load('return 1')()", &["lua.load"]), []);
    assert_eq!(
        short("local f = string.dump return f", &[]),
        [("absent_facility", W, "dump".to_owned())]
    );
    // `print` is only read (passed as a value: nil), `string.dump` called.
    assert_eq!(
        short("string.dump(print)", &[]),
        [
            ("absent_facility", E, "dump".to_owned()),
            ("absent_facility", W, "print".to_owned())
        ]
    );
    assert_eq!(
        errors("os.exit(1)", &[]),
        [("absent_facility", "os".to_owned())]
    );
    assert!(help_of("os.exit(1)", Rule::AbsentFacility).contains("`lua.os`"));
    assert_eq!(errors("os.exit(1)", &["lua.os"]), []);
    // What no grant adds: a member of `os` left out, the debug library.
    assert_eq!(
        errors("os.execute('ls')", &["lua.os"]),
        [("absent_facility", "execute".to_owned())]
    );
    let help = lint_with("os.execute('ls')", &["lua.os"])[0].help.join(" ");
    assert!(help.contains("quirl.process.run"), "{help}");
    assert!(help_of("debug.traceback()", Rule::AbsentFacility).contains("debug library"));
    assert_eq!(
        errors("_G.print('x')", &[]),
        [("absent_facility", "print".to_owned())]
    );
}

#[test]
fn sdk_calls_with_too_few_arguments_fail_and_too_many_are_ignored() {
    assert_eq!(
        short("return quirl.process.run()", &[]),
        [("sdk_arity", E, "run".to_owned())]
    );
    assert_eq!(
        short("return quirl.cwd(1)", &[]),
        [("sdk_arity", W, "cwd".to_owned())]
    );
    assert_eq!(
        short("return quirl:cwd()", &[]),
        [("sdk_arity", W, "cwd".to_owned())]
    );
    assert_eq!(
        short(
            "return function(...) return quirl.process.run(...) end",
            &[]
        ),
        []
    );
    assert_eq!(short("quirl.config { ui = {} }", &[]), []);
    assert!(
        help_of("return quirl.process.run()", Rule::SdkArity)
            .contains("quirl.process.run(command)")
    );
}

#[test]
fn annotation_tags_near_luals_tags_are_errors_others_warnings() {
    assert_eq!(
        short("---@retrun string\nreturn 'x'", &[]),
        [("annotation_tag", E, "@retrun".to_owned())]
    );
    assert_eq!(
        short("---@frobnicate\nreturn 1", &[]),
        [("annotation_tag", W, "@frobnicate".to_owned())]
    );
    assert_eq!(
        short(
            "---@class Point\n---@field x number\n---@tparam number y LDoc\nreturn {}",
            &[]
        ),
        []
    );
}

#[test]
fn globals_locals_and_shadowing_are_warnings() {
    assert_eq!(
        short("x = 1 x = 2 return x", &[]),
        [("global_write", W, "x".to_owned())]
    );
    let typo = "local count = 0\ncont = count + 1\nreturn count";
    assert_eq!(short(typo, &[]), [("global_write", W, "cont".to_owned())]);
    assert!(help_of(typo, Rule::GlobalWrite).contains("the local `count`"));
    assert_eq!(
        short("local unused = 1 local _kept = 2 return 3", &[]),
        [("unused_local", W, "unused".to_owned())]
    );
    assert_eq!(
        short("local a = 1\ndo local a = 2 return a end", &[]),
        [
            ("unused_local", W, "a".to_owned()),
            ("shadowing", W, "a".to_owned())
        ]
    );
    let shadowing = lint_with("local a = 1\ndo local a = 2 return a end", &[]);
    assert!(shadowing[1].message.contains("of line 1"), "{shadowing:?}");
}

#[test]
fn guarded_uses_are_warnings() {
    for source in [
        "if io then io.write('x') end",
        "if not jit then return end jit.off()",
        "local ok = pcall(function() return os.time() end) return ok",
        "local ok, e = pcall(require, 'json') return ok",
        "local unpack = table.unpack or unpack return unpack({1})",
        "if type(setfenv) == 'function' then setfenv(1, {}) end",
        "setmetatable(_G, {__index = function() return 1 end}) return foo()",
        "local _ENV = {print = function() end} print('x')",
        "_G[('x'):upper()] = function() end return X()",
        "if string.pack then return string.pack('i4', 1) end",
    ] {
        assert_eq!(errors(source, &[]), [], "{source}");
    }
}

#[test]
fn code_that_never_runs_here_is_not_an_error() {
    for source in [
        "error('stop') prnt('x')",
        "local function fail(m) error(m) end\nfail('x') prnt('y')",
        "local function deep(n) if n == 0 then error() else deep(n - 1) end end\ndeep(3) prnt('z')",
        "local function raise() return error('x') end\nraise() missing()",
        "if T == nil then return end T.listcode() f()",
        "if not jit then return end jit.off() missing()",
    ] {
        assert_eq!(errors(source, &[]), [], "{source}");
    }
    // A guard on something that exists hides nothing, and a function that
    // can return is no exit.
    assert_eq!(
        errors("if string == nil then return end prnt('x')", &[]),
        [("undefined_global", "prnt".to_owned())]
    );
    assert_eq!(
        errors(
            "local function maybe(n) if n then error() end end\nmaybe() prnt('x')",
            &[]
        ),
        [("undefined_global", "prnt".to_owned())]
    );
}

#[test]
fn what_the_chunk_defines_is_defined() {
    for source in [
        "function helper() return 1 end return helper()",
        "function string.trim(s) return (s:gsub('^%s+', '')) end return string.trim(' x')",
        "quirl.extra = {} quirl.extra.f = function() end return quirl.extra.f()",
        "local io = {write = function() end} io.write('x')",
        "local M = {} function M.f() end function M:g() return self end return M",
        "local t = setmetatable({}, {__index = string}) return t.upper('x')",
    ] {
        assert_eq!(errors(source, &[]), [], "{source}");
    }
}

#[test]
fn lua_5_4_syntax_is_read() {
    let source = r#"
local x <const> = 10
local f <close> = nil
local a, b = 7 // 2, 7 & 3 | 1 ~ 2 << 1 >> 1
for i = 1, 3 do
  if i == 2 then goto continue end
  a = a + i
  ::continue::
end
repeat local done = true until done
return x + a + b + #"é" + 0x1p4 + 1e3
"#;
    assert_eq!(short(source, &[]), []);
}

#[test]
fn a_source_over_the_lint_limit_is_compiled_but_not_linted() {
    let source = "return 1".to_owned() + &" ".repeat(lint::LINT_SOURCE_BYTES_MAX);
    let found = lint_with(&source, &[]);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].rule, Rule::LintIncomplete);
    assert_eq!(found[0].severity, W);
}

#[test]
fn errors_come_first_then_warnings_each_in_source_order() {
    let found = lint_with("local u = 1\nprnt(1)\nlocal v = 2\nfoo(1)", &[]);
    let order: Vec<(Severity, usize)> = found.iter().map(|f| (f.severity, f.span.start)).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    assert_eq!(found[0].severity, E);
}

#[test]
fn stock_lua_code_is_judged_against_stock_lua() {
    let stock = Environment::stock().unwrap();
    let source = "print(io.read('l'), os.time(), debug.traceback(), string.dump(print))";
    assert!(lint::lint(source, &stock).is_empty());
    assert!(!lint_with(source, &[]).is_empty());
}
