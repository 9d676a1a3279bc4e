//! The rules: what the walk's facts mean in the sandbox the chunk will run
//! in, as findings with a severity, a message and a way to fix each.
//!
//! Severity follows one principle: an **error** is a certain failure (or,
//! for annotation tags, a certain mistake) where the code is reached. So
//! calling or indexing a name that does not exist is an error, reading it
//! (it is `nil`) a warning; and anything the chunk guards is a warning:
//! inside `pcall`/`xpcall`, or a path the chunk tests somewhere (`if io
//! then`, `x = unpack or table.unpack`, `type(jit)`), or code that never
//! runs here (after `error(…)` in its block, or after `if NAME == nil then
//! return end` for a `NAME` the environment lacks), or when globals can
//! appear by other ways (`_ENV`, `setmetatable(_G, …)`, a globals table
//! with a metatable, a live reading cut short).

use super::annotations::{LUALS_TAGS, UnknownTag};
use super::environment::{Entry, Environment};
use super::sdk_calls::signature;
use super::suggest::closest;
use super::walk::{Access, Dead, Facts, LocalNote, Use};
use super::{Finding, LineIndex, Rule, Severity, shown};
use std::collections::{HashMap, HashSet};

/// How to do without a facility the sandbox leaves out, when no grant adds it.
fn facility_help(path: &str) -> String {
    let root = path.split('.').next().unwrap_or(path);
    match (root, path) {
        ("print" | "warn", _) => "the sandbox has no output stream: return the value instead (the parent prints what a chunk returns)".to_owned(),
        ("io", _) => "the sandbox has no files and no terminal: take input from the execution context (`ctx.input`) and return the output".to_owned(),
        ("os", _) => "the sandbox has no operating system access: `quirl.process.run` asks the parent to run a program it granted".to_owned(),
        ("debug", _) => "the debug library is not available in the sandbox".to_owned(),
        (_, "string.dump") => "the sandbox never loads bytecode: keep functions as values, or as source text".to_owned(),
        ("dofile" | "loadfile", _) => "the sandbox has no files: with the `lua.load` grant, `load` compiles text and `require` finds preloaded modules".to_owned(),
        _ => "it is not part of the sandbox (DESIGN §15.3)".to_owned(),
    }
}

/// Help for a facility the sandbox leaves out: the grant that adds it, or
/// how to do without.
fn absent_help(env: &Environment, path: &[&str]) -> String {
    match env.granted_by(path) {
        Some(grant) => format!(
            "the grant `{grant}` adds it (`quirl-lua --grant {grant}`, or `{grant}` in initialize's grants)"
        ),
        None => facility_help(&path.join(".")),
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

fn use_verb(use_: Use) -> &'static str {
    match use_ {
        Use::Call(_) => "called",
        Use::Index => "indexed",
        Use::Read => "read",
        Use::Write => "assigned",
    }
}

/// Whether a use of a missing value fails: calling or indexing `nil` does.
fn fails(use_: Use) -> bool {
    matches!(use_, Use::Call(_) | Use::Index)
}

struct Context<'a> {
    env: &'a Environment,
    facts: &'a Facts,
    /// No global can appear by another way than the ones the lint sees.
    names_certain: bool,
}

impl Context<'_> {
    /// The severity of using a missing path of `access` up to element
    /// `index` (0 is the root) in the way `use_`.
    fn severity(&self, access: &Access, index: usize, use_: Use) -> Severity {
        let guarded = access.in_pcall
            || (0..=index).any(|len| self.facts.probed.contains(&access.path(len + 1)))
            || access.dead.iter().any(|dead| self.never_runs(dead));
        if fails(use_) && !guarded && self.names_certain {
            Severity::Error
        } else {
            Severity::Warning
        }
    }

    /// Whether code that `dead` describes never runs in this environment.
    fn never_runs(&self, dead: &Dead) -> bool {
        match dead {
            Dead::AfterError => true,
            Dead::Unless(path) => {
                let parts: Vec<&str> = path.split('.').collect();
                match parts.split_first() {
                    Some((root, [])) => !self.global_defined(root),
                    Some((root, members)) => {
                        !self.global_defined(root)
                            || self.env.library(&[root]).is_some_and(|library| {
                                library.get_path(members).is_none()
                                    && !self.facts.defined_members.contains(path)
                            })
                    }
                    None => false,
                }
            }
        }
    }

    fn global_defined(&self, name: &str) -> bool {
        self.env.has_global(name) || self.facts.defined_globals.contains(name) || name == "_ENV"
    }
}

/// Every finding of the rules, unsorted.
pub fn findings(
    lines: &LineIndex,
    facts: &Facts,
    tags: &[UnknownTag],
    env: &Environment,
) -> Vec<Finding> {
    let context = Context {
        env,
        facts,
        names_certain: env.names_complete && !facts.dynamic_globals,
    };
    let mut found = Vec::new();
    let mut written: HashSet<&str> = HashSet::new();
    let mut helps: HashMap<&str, Vec<String>> = HashMap::new();
    for access in &facts.accesses {
        let name = access.root.0.as_str();
        if access.last == Use::Write && access.members.is_empty() {
            if !env.has_global(name) && written.insert(name) {
                found.push(global_write(access, facts));
            }
            continue;
        }
        if !context.global_defined(name) {
            let help = helps
                .entry(name)
                .or_insert_with(|| missing_help(&context, name));
            found.push(missing_global(&context, access, help));
            continue;
        }
        if let Some(finding) = members(&context, access) {
            found.push(finding);
            continue;
        }
        if let Some(finding) = sdk_arity(&context, access) {
            found.push(finding);
        }
    }
    for tag in tags {
        found.push(annotation(tag));
    }
    for note in &facts.locals {
        found.push(local_note(lines, note));
    }
    found
}

fn global_write(access: &Access, facts: &Facts) -> Finding {
    let name = &access.root.0;
    let mut help = vec![format!(
        "declare it `local {}` unless other chunks read it as a global",
        shown(name)
    )];
    if let Some(local) = closest(name, facts.local_names.iter().map(String::as_str)) {
        help.insert(0, format!("did you mean the local `{}`?", shown(local)));
    }
    Finding {
        rule: Rule::GlobalWrite,
        severity: Severity::Warning,
        span: access.root.1,
        message: format!("assigns the global `{}`", shown(name)),
        label: "assigned here: a global of the whole VM, visible to every later request".to_owned(),
        help,
    }
}

/// How to fix a root name nothing defines (the same for each use of it).
fn missing_help(context: &Context<'_>, name: &str) -> Vec<String> {
    let env = context.env;
    if env.stock.entries.contains_key(name) || env.granted_by(&[name]).is_some() {
        return vec![absent_help(env, &[name])];
    }
    let candidates = env
        .global_names()
        .chain(context.facts.defined_globals.iter().map(String::as_str))
        .chain(context.facts.local_names.iter().map(String::as_str));
    match closest(name, candidates)
        .or_else(|| closest(name, env.stock.entries.keys().map(String::as_str)))
    {
        Some(near) if env.stock.entries.contains_key(near) && !env.has_global(near) => {
            vec![format!(
                "did you mean `{}`? {}",
                shown(near),
                capitalized(&absent_help(env, &[near]))
            )]
        }
        Some(near) => vec![format!("did you mean `{}`?", shown(near))],
        None => vec![format!(
            "define it first (`local {} = …`), or check its spelling",
            shown(name)
        )],
    }
}

/// A root name nothing defines: absent from the sandbox, or unknown.
fn missing_global(context: &Context<'_>, access: &Access, help: &[String]) -> Finding {
    let (name, span) = (&access.root.0, access.root.1);
    let use_ = access.use_at(0);
    let severity = context.severity(access, 0, use_);
    let env = context.env;
    let verb = use_verb(use_);
    if env.stock.entries.contains_key(name.as_str()) || env.granted_by(&[name]).is_some() {
        return Finding {
            rule: Rule::AbsentFacility,
            severity,
            span,
            message: format!("`{}` is not available in the sandbox", shown(name)),
            label: format!("{verb} here, but the sandbox has no `{}`", shown(name)),
            help: help.to_vec(),
        };
    }
    let message = if fails(use_) {
        format!("`{}` is not defined", shown(name))
    } else {
        format!("`{}` is not defined (it reads as nil)", shown(name))
    };
    Finding {
        rule: Rule::UndefinedGlobal,
        severity,
        span,
        message,
        label: format!("{verb} here, but nothing defines `{}`", shown(name)),
        help: help.to_vec(),
    }
}

/// The first member of a library path that does not exist.
fn members(context: &Context<'_>, access: &Access) -> Option<Finding> {
    let env = context.env;
    let root = access.root.0.as_str();
    if context.facts.defined_globals.contains(root) {
        // The chunk replaces the whole table: its members are its own.
        return None;
    }
    let mut path: Vec<&str> = vec![root];
    let mut library = env.library(&path)?;
    for (index, (member, span)) in access.members.iter().enumerate() {
        let use_ = access.use_at(index + 1);
        let dotted = format!("{}.{member}", path.join("."));
        if let Some(entry) = library.get(member) {
            path.push(member);
            match entry {
                Entry::Table(_) => match env.library(&path) {
                    Some(next) => library = next,
                    None => return None,
                },
                _ => return None,
            }
            continue;
        }
        if use_ == Use::Write
            || context.facts.defined_members.contains(&dotted)
            || context
                .facts
                .defined_members
                .iter()
                .any(|defined| defined.starts_with(&format!("{dotted}.")))
        {
            return None;
        }
        let severity = context.severity(access, index + 1, use_);
        let mut full = path.clone();
        full.push(member);
        let verb = use_verb(use_);
        let container = path.join(".");
        if env.stock.get(&full).is_some() || env.granted_by(&full).is_some() {
            return Some(Finding {
                rule: Rule::AbsentFacility,
                severity,
                span: *span,
                message: format!("`{}` is not available in the sandbox", shown(&dotted)),
                label: format!(
                    "{verb} here, but the sandbox's `{container}` has no `{}`",
                    shown(member)
                ),
                help: vec![absent_help(env, &full)],
            });
        }
        let names = library.names();
        let help = match closest(member, names.iter().copied()) {
            Some(near) => format!("did you mean `{container}.{near}`?"),
            None => format!("`{container}` has: {}", names.join(", ")),
        };
        return Some(Finding {
            rule: Rule::UnknownMember,
            severity,
            span: *span,
            message: format!("`{container}` has no member `{}`", shown(member)),
            label: format!("{verb} here, but `{}` does not exist", shown(&dotted)),
            help: vec![help],
        });
    }
    None
}

/// A call of an SDK function with too few (error) or too many (warning)
/// arguments.
fn sdk_arity(context: &Context<'_>, access: &Access) -> Option<Finding> {
    let Use::Call(arguments) = access.last else {
        return None;
    };
    if context.env.library(&[access.root.0.as_str()]).is_none()
        || context.facts.defined_globals.contains(&access.root.0)
    {
        return None;
    }
    let path = access.path(access.members.len() + 1);
    let signature = signature(&path)?;
    let wanted = signature.parameters.len();
    // With an open last argument at least `count - 1` values are passed.
    let fewest = if arguments.open {
        arguments.count.saturating_sub(1)
    } else {
        arguments.count
    };
    let span = access
        .members
        .last()
        .map_or(access.root.1, |(_, span)| *span);
    let form = format!("`{path}({})`", signature.parameters.join(", "));
    let plural = |n: usize| if n == 1 { "argument" } else { "arguments" };
    let method = if arguments.method {
        " (a method call passes the table first: call it with `.`)"
    } else {
        ""
    };
    if !arguments.open && arguments.count < wanted {
        let severity = if access.in_pcall {
            Severity::Warning
        } else {
            Severity::Error
        };
        return Some(Finding {
            rule: Rule::SdkArity,
            severity,
            span,
            message: format!(
                "`{path}` takes {wanted} {}, this call passes {}",
                plural(wanted),
                arguments.count
            ),
            label: format!(
                "called with {} {}",
                arguments.count,
                plural(arguments.count)
            ),
            help: vec![format!("call it as {form}{method}")],
        });
    }
    if fewest > wanted {
        return Some(Finding {
            rule: Rule::SdkArity,
            severity: Severity::Warning,
            span,
            message: format!(
                "`{path}` takes {wanted} {}, this call passes {fewest}: the rest are ignored",
                plural(wanted)
            ),
            label: format!("called with {fewest} {}", plural(fewest)),
            help: vec![format!("call it as {form}{method}")],
        });
    }
    None
}

fn annotation(tag: &UnknownTag) -> Finding {
    match tag.near {
        Some(near) => Finding {
            rule: Rule::AnnotationTag,
            severity: Severity::Error,
            span: tag.span,
            message: format!("`---@{}` is not an annotation tag", shown(&tag.tag)),
            label: "misspelt tag: the language server ignores this annotation".to_owned(),
            help: vec![format!("did you mean `---@{near}`?")],
        },
        None => Finding {
            rule: Rule::AnnotationTag,
            severity: Severity::Warning,
            span: tag.span,
            message: format!("`---@{}` is not a LuaLS annotation tag", shown(&tag.tag)),
            label: "unknown tag: the language server ignores this annotation".to_owned(),
            help: vec![format!("LuaLS knows: {}", LUALS_TAGS.join(", "))],
        },
    }
}

fn local_note(lines: &LineIndex, note: &LocalNote) -> Finding {
    match note {
        LocalNote::Unused { name, span } => Finding {
            rule: Rule::UnusedLocal,
            severity: Severity::Warning,
            span: *span,
            message: format!("local `{}` is never used", shown(name)),
            label: "declared here, read nowhere".to_owned(),
            help: vec![format!(
                "remove it, or name it `_{}` to show it is unused on purpose",
                shown(name)
            )],
        },
        LocalNote::Shadows {
            name,
            span,
            shadowed,
        } => Finding {
            rule: Rule::Shadowing,
            severity: Severity::Warning,
            span: *span,
            message: format!(
                "local `{}` shadows the local `{}` of line {}",
                shown(name),
                shown(name),
                lines.line_column(shadowed.start).0
            ),
            label: "this declaration hides the earlier one".to_owned(),
            help: vec![
                "rename one of them, or assign to the earlier one without `local`".to_owned(),
            ],
        },
    }
}
