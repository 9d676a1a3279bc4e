//! The lint `check` runs after the source compiles (SPEC §7.1, DESIGN
//! §15.10): what would fail in *this* sandbox, under *these* grants, before
//! anything runs.
//!
//! The source is parsed by `full_moon` (a maintained, lossless Lua parser
//! with Lua 5.4 syntax and byte positions; the parser `selene` is built
//! on), walked once with Lua's scoping rules (`walk`), and the facts are
//! judged against the sandbox's own globals (`environment`, read from the
//! worker's real environment, not a hand-kept list). This module is not the
//! compiler: Lua's own compiler runs first and decides whether the source
//! is valid; a source it accepts but full_moon cannot read is compiled
//! and not linted (`lint_incomplete`).
//!
//! | rule | finds | severity |
//! |---|---|---|
//! | `undefined_global` | a global nothing defines (not in the sandbox, not assigned by the chunk, not defined by an earlier request) | error when called or indexed outside a guard (a certain failure when reached); warning when only read (it is `nil`) or guarded |
//! | `absent_facility` | a global or library member of stock Lua 5.4 the sandbox leaves out under the request's grants (`io`, `os`, `print`, `load`, `require`, `debug`, `string.dump`, …) | as `undefined_global`; the help names the grant that adds it, where one does |
//! | `unknown_member` | a member of a sandbox library table (`string`, `table`, `math`, `utf8`, `coroutine`, `quirl` and its tables, …) that does not exist | as `undefined_global`, with "did you mean" |
//! | `sdk_arity` | a call of a `quirl` function with too few or too many arguments | error for too few (the call fails), warning for too many (ignored) |
//! | `annotation_tag` | a `---@tag` comment whose tag LuaLS/EmmyLua/LDoc do not know | error for a near miss of a LuaLS tag (`---@parm`), warning otherwise |
//! | `global_write` | an assignment that creates a global (it persists across requests) | warning |
//! | `unused_local` | a `local` (or local function) nothing reads; names starting with `_`, parameters and loop variables are exempt | warning |
//! | `shadowing` | a local that hides a visible local of the same name | warning |
//! | `lint_incomplete` | a source the lint could not read in full (over 512 KiB; nested or chained deeper than `depth` allows; a construct full_moon refuses) | warning |
//!
//! "Guarded" means inside the arguments of `pcall`/`xpcall`, or a path the
//! chunk tests somewhere (`if io then`, `unpack or table.unpack`,
//! `type(jit)`), or a chunk that makes globals dynamic (`_ENV` as a local,
//! `setmetatable(_G, …)`, `_G[k] = v`). A finding that names another name
//! carries a "did you mean".

mod annotations;
mod depth;
pub mod environment;
mod report;
mod rules;
mod sdk_calls;
mod suggest;
mod walk;

pub use environment::Environment;
pub use quirl_lua_protocol::records::Severity;
pub use report::{check_error, check_report};
pub use sdk_calls::{SDK_SIGNATURES, Signature};

/// Sources larger than this are compiled but not linted (the parse tree
/// takes memory outside the VM's budget: about 180 bytes per source byte).
pub const LINT_SOURCE_BYTES_MAX: usize = 512 * 1024;

/// A byte span of the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

/// The rules (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// A global nothing defines.
    UndefinedGlobal,
    /// A stock Lua facility the sandbox leaves out.
    AbsentFacility,
    /// A member of a library table that does not exist.
    UnknownMember,
    /// An SDK call with the wrong number of arguments.
    SdkArity,
    /// An annotation tag no dialect knows.
    AnnotationTag,
    /// An assignment that creates a global.
    GlobalWrite,
    /// A local nothing reads.
    UnusedLocal,
    /// A local that hides another.
    Shadowing,
    /// The lint could not read the whole source.
    LintIncomplete,
    /// More findings than a report holds (the last entry of a full report).
    MoreFindings,
}

impl Rule {
    /// Every rule.
    pub const ALL: &'static [Rule] = &[
        Rule::UndefinedGlobal,
        Rule::AbsentFacility,
        Rule::UnknownMember,
        Rule::SdkArity,
        Rule::AnnotationTag,
        Rule::GlobalWrite,
        Rule::UnusedLocal,
        Rule::Shadowing,
        Rule::LintIncomplete,
        Rule::MoreFindings,
    ];

    /// The rule's name in a check report (`undefined_global`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            Rule::UndefinedGlobal => "undefined_global",
            Rule::AbsentFacility => "absent_facility",
            Rule::UnknownMember => "unknown_member",
            Rule::SdkArity => "sdk_arity",
            Rule::AnnotationTag => "annotation_tag",
            Rule::GlobalWrite => "global_write",
            Rule::UnusedLocal => "unused_local",
            Rule::Shadowing => "shadowing",
            Rule::LintIncomplete => "lint_incomplete",
            Rule::MoreFindings => "more_findings",
        }
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The rule that found it.
    pub rule: Rule,
    /// Error or warning.
    pub severity: Severity,
    /// Where.
    pub span: Span,
    /// What is wrong.
    pub message: String,
    /// What the span shows (the text under the caret).
    pub label: String,
    /// How to fix it.
    pub help: Vec<String>,
}

/// Lint `source` for a sandbox described by `env`. Errors come first,
/// then warnings, each in source order.
pub fn lint(source: &str, env: &Environment) -> Vec<Finding> {
    lint_deferring(source, env).0
}

/// The parse tree of a linted source, kept to be freed later: freeing it
/// is about a sixth of the lint's time (hundreds of thousands of small
/// allocations), which the worker spends after its answer is sent
/// (`Vm::release_deferred`) instead of before.
pub struct Deferred(#[allow(dead_code)] Option<full_moon::ast::AstResult>);

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Deferred(parse tree)")
    }
}

/// [`lint`], handing back the parse tree for the caller to drop when it
/// suits it.
pub fn lint_deferring(source: &str, env: &Environment) -> (Vec<Finding>, Deferred) {
    let (mut found, tree) = if source.len() > LINT_SOURCE_BYTES_MAX {
        let why = format!(
            "the source has {} bytes; the lint reads at most {LINT_SOURCE_BYTES_MAX}",
            source.len()
        );
        (vec![not_linted(why)], None)
    } else if let Some(why) = depth::too_deep(source) {
        (vec![not_linted(why)], None)
    } else {
        let parsed = full_moon::parse_fallible(source, full_moon::LuaVersion::lua54());
        (lint_parsed(source, &parsed, env), Some(parsed))
    };
    found.sort_by_key(|finding| (finding.severity, finding.span.start, finding.rule));
    (found, Deferred(tree))
}

fn lint_parsed(
    source: &str,
    parsed: &full_moon::ast::AstResult,
    env: &Environment,
) -> Vec<Finding> {
    if let Some(error) = parsed.errors().first() {
        let (start, _) = error.range();
        return vec![not_linted(format!(
            "its parser stopped at line {}, column {}: {}",
            start.line(),
            start.character(),
            error.error_message()
        ))];
    }
    let ast = parsed.ast();
    let facts = walk::walk(ast.nodes());
    let tags = if annotations::may_have_annotations(source) {
        annotations::unknown_tags(ast)
    } else {
        Vec::new()
    };
    let lines = LineIndex::new(source);
    let mut found = rules::findings(&lines, &facts, &tags, env);
    if facts.truncated {
        found.push(not_linted(
            "the source nests deeper than the lint walks".to_owned(),
        ));
    }
    found
}

/// The one finding of a source the lint could not read, saying `why`.
pub fn not_linted(why: String) -> Finding {
    Finding {
        rule: Rule::LintIncomplete,
        severity: Severity::Warning,
        span: Span { start: 0, end: 0 },
        message: format!("the lint could not read all of this source: {why}"),
        label: "not linted".to_owned(),
        help: vec!["the source compiles; beyond that, only what runs will tell".to_owned()],
    }
}

/// A name as a message shows it: at most 64 bytes (names can be long).
fn shown(name: &str) -> String {
    crate::error::clip(name, 64)
}

/// Lines and columns of byte offsets (1-based; a column counts
/// characters, as a compiler's does).
#[derive(Debug)]
pub struct LineIndex<'a> {
    source: &'a str,
    /// Byte offset where each line starts.
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    /// Index the line starts of `source` (lines end at `\n`).
    pub fn new(source: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(memchr::memchr_iter(b'\n', source.as_bytes()).map(|at| at + 1));
        Self { source, starts }
    }

    /// The 1-based line and column of byte `offset`.
    pub fn line_column(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.source.len());
        let line = self.starts.partition_point(|&start| start <= offset);
        let start = self.starts[line.saturating_sub(1)];
        let column = self
            .source
            .get(start..offset)
            .map_or(offset - start, |text| text.chars().count());
        (line, column + 1)
    }
}
