//! One walk over a chunk's syntax tree (full_moon's): Lua's scoping rules
//! applied to every name, so that each use is known to be a local or a
//! global, and what the chunk does with each global path.
//!
//! The walk reports facts, not findings: the global paths the chunk reads,
//! calls, indexes or assigns ([`Access`]), what it defines, which names it
//! probes before use, and the locals it never uses or that shadow another.
//! `super::rules` decides what is wrong with them. Scoping follows the Lua
//! 5.4 manual §3.5: a `local` statement's names are visible after the
//! statement, a `local function`'s name inside its body, a `repeat` block's
//! locals in its `until` condition, a `for` loop's names in its body.

use super::Span;
use full_moon::ast::{
    Block, Call, Expression, Field, FunctionArgs, FunctionBody, FunctionCall, Index, LastStmt,
    Parameter, Prefix, Stmt, Suffix, Var, punctuated::Punctuated,
};
use full_moon::tokenizer::{Symbol, TokenReference, TokenType};
use std::collections::{HashMap, HashSet};

/// Nesting deeper than this is not walked further (Lua's own compiler
/// refuses sources nested beyond about 200 levels before the lint runs;
/// this bounds the recursion for any other caller).
const DEPTH_MAX: usize = 512;

/// What happens to the last element of a global path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Its value is read.
    Read,
    /// It is called with these arguments.
    Call(Arguments),
    /// It is indexed with a key that is not a constant name.
    Index,
    /// It is assigned.
    Write,
}

/// The arguments of a call, as far as they can be counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arguments {
    /// Values passed, counting the receiver of a method call.
    pub count: usize,
    /// The last argument is a call or `...`, which pass any number of values.
    pub open: bool,
    /// Written as a method call (`a:b()`), which passes the receiver first.
    pub method: bool,
}

/// One use of a global path: `quirl.process.run(...)` is the root
/// `quirl`, the members `process` and `run`, and a call.
#[derive(Debug, Clone)]
pub struct Access {
    /// The global name and where it stands.
    pub root: (String, Span),
    /// The constant member names that follow it, each with its span.
    pub members: Vec<(String, Span)>,
    /// What happens to the last element.
    pub last: Use,
    /// Inside the arguments of `pcall`/`xpcall`, whose errors are caught.
    pub in_pcall: bool,
    /// Why the access may never be reached (empty: nothing says so).
    pub dead: Vec<Dead>,
}

/// Why code may never run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dead {
    /// It follows a call of `error` in its block.
    AfterError,
    /// It follows `if NAME == nil then … return end` (or `if not NAME`)
    /// in its block: it runs only where the global path `NAME` exists.
    Unless(String),
}

impl Access {
    /// What happens to the element at `index` (0 is the root): every
    /// element but the last is indexed by the next.
    pub fn use_at(&self, index: usize) -> Use {
        if index < self.members.len() {
            Use::Index
        } else {
            self.last
        }
    }

    /// The dotted path of the first `len` elements (`quirl.process`).
    pub fn path(&self, len: usize) -> String {
        let mut path = self.root.0.clone();
        for (member, _) in self.members.iter().take(len.saturating_sub(1)) {
            path.push('.');
            path.push_str(member);
        }
        path
    }
}

/// A local that is never read, or that shadows another.
#[derive(Debug, Clone)]
pub enum LocalNote {
    /// A local (or local function) that nothing reads.
    Unused {
        /// Its name.
        name: String,
        /// Where it is declared.
        span: Span,
    },
    /// A local whose name another visible local already has.
    Shadows {
        /// The name.
        name: String,
        /// The new declaration.
        span: Span,
        /// Where the shadowed one was declared.
        shadowed: Span,
    },
}

/// What the walk found.
#[derive(Debug, Default)]
pub struct Facts {
    /// Every use of a global path, in source order.
    pub accesses: Vec<Access>,
    /// Global names the chunk assigns anywhere (they exist once it runs).
    pub defined_globals: HashSet<String>,
    /// Dotted member paths the chunk assigns anywhere (`string.trim`).
    pub defined_members: HashSet<String>,
    /// Paths the chunk tests before using them: conditions, `and`/`or`
    /// operands, `type(x)` (a global may be absent on purpose there).
    pub probed: HashSet<String>,
    /// Every local name declared, for suggestions.
    pub local_names: HashSet<String>,
    /// The chunk changes how globals resolve (`_ENV` as a local, `_G[k] =`,
    /// `setmetatable(_G, …)`): no global is certainly undefined.
    pub dynamic_globals: bool,
    /// Locals never read or shadowing another.
    pub locals: Vec<LocalNote>,
    /// Nesting went past [`DEPTH_MAX`]: parts were not walked.
    pub truncated: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LocalKind {
    /// `local x`, `local function f`: reported when unused.
    Local,
    /// Parameters, loop variables, `<close>` locals, `self`: never
    /// reported when unused.
    Quiet,
}

#[derive(Debug)]
struct Local {
    name: String,
    span: Span,
    kind: LocalKind,
    used: bool,
}

/// The walk's state: the locals in scope and the facts found.
struct Walker {
    locals: Vec<Local>,
    /// Name → indexes into `locals` of the visible locals of that name,
    /// innermost last (a lookup must not scan every local of a long chunk).
    visible: HashMap<String, Vec<usize>>,
    /// Start index into `locals` of each open scope.
    scopes: Vec<usize>,
    facts: Facts,
    /// How many `pcall`/`xpcall` argument lists enclose the current node.
    pcall_depth: usize,
    depth: usize,
    /// Why the statements being walked may never run (innermost last).
    dead: Vec<Dead>,
    /// Local functions that raise on every path (`local function fail(m)
    /// error(m) end`): what follows a call of one never runs.
    raising: HashSet<String>,
}

/// Walk `block`, the chunk.
pub fn walk(block: &Block) -> Facts {
    let mut walker = Walker {
        locals: Vec::new(),
        visible: HashMap::new(),
        scopes: Vec::new(),
        facts: Facts::default(),
        pcall_depth: 0,
        depth: 0,
        dead: Vec::new(),
        raising: HashSet::new(),
    };
    walker.scoped_block(block, &[]);
    walker.facts
}

fn span_of(token: &TokenReference) -> Span {
    Span {
        start: token.start_position().bytes(),
        end: token.end_position().bytes(),
    }
}

fn name_of(token: &TokenReference) -> Option<&str> {
    match token.token_type() {
        TokenType::Identifier { identifier } => Some(identifier.as_str()),
        _ => None,
    }
}

fn string_literal(token: &TokenReference) -> Option<&str> {
    match token.token_type() {
        TokenType::StringLiteral { literal, .. } => Some(literal.as_str()),
        _ => None,
    }
}

/// Whether `text` can be written as a member name (`t.name`).
fn is_name(text: &str) -> bool {
    text.bytes()
        .next()
        .is_some_and(|b| b == b'_' || b.is_ascii_alphabetic())
        && text.bytes().all(|b| b == b'_' || b.is_ascii_alphanumeric())
}

fn is_symbol(expression: &Expression, symbol: Symbol) -> bool {
    matches!(expression, Expression::Symbol(token) if token.is_symbol(symbol))
}

fn arguments(args: &FunctionArgs, method: bool) -> Arguments {
    let (count, open) = match args {
        FunctionArgs::Parentheses { arguments, .. } => {
            let open = arguments.iter().last().is_some_and(|last| {
                matches!(last, Expression::FunctionCall(_)) || is_symbol(last, Symbol::Ellipsis)
            });
            (arguments.len(), open)
        }
        _ => (1, false),
    };
    Arguments {
        count: count + usize::from(method),
        open,
        method,
    }
}

/// A constant member key: `.name`, or `["name"]` with a name-like string.
fn constant_key(index: &Index) -> Option<(String, Span)> {
    match index {
        Index::Dot { name, .. } => Some((name_of(name)?.to_owned(), span_of(name))),
        Index::Brackets { expression, .. } => match expression.as_ref() {
            Expression::String(token) => {
                let text = string_literal(token)?;
                is_name(text).then(|| (text.to_owned(), span_of(token)))
            }
            _ => None,
        },
        _ => None,
    }
}

impl Walker {
    fn open_scope(&mut self) {
        self.scopes.push(self.locals.len());
    }

    fn close_scope(&mut self) {
        let start = self.scopes.pop().unwrap_or(0);
        for local in self.locals.drain(start..) {
            if let Some(stack) = self.visible.get_mut(&local.name) {
                stack.pop();
            }
            if local.kind == LocalKind::Local && !local.used && !local.name.starts_with('_') {
                self.facts.locals.push(LocalNote::Unused {
                    name: local.name,
                    span: local.span,
                });
            }
        }
    }

    fn find_local(&mut self, name: &str) -> Option<&mut Local> {
        let index = *self.visible.get(name)?.last()?;
        self.locals.get_mut(index)
    }

    fn is_local(&self, name: &str) -> bool {
        self.visible
            .get(name)
            .is_some_and(|stack| !stack.is_empty())
    }

    fn push_local(&mut self, local: Local) {
        let index = self.locals.len();
        match self.visible.get_mut(&local.name) {
            Some(stack) => stack.push(index),
            None => {
                self.visible.insert(local.name.clone(), vec![index]);
            }
        }
        self.locals.push(local);
    }

    fn declare(&mut self, token: &TokenReference, kind: LocalKind) {
        let Some(name) = name_of(token) else {
            return;
        };
        let span = span_of(token);
        if name == "_ENV" {
            self.facts.dynamic_globals = true;
        }
        if !name.starts_with('_')
            && let Some(&previous) = self.visible.get(name).and_then(|stack| stack.last())
        {
            self.facts.locals.push(LocalNote::Shadows {
                name: name.to_owned(),
                span,
                shadowed: self.locals[previous].span,
            });
        }
        if !self.facts.local_names.contains(name) {
            self.facts.local_names.insert(name.to_owned());
        }
        self.push_local(Local {
            name: name.to_owned(),
            span,
            kind,
            used: false,
        });
    }

    /// Enter one more level of nesting; false past [`DEPTH_MAX`].
    fn enter(&mut self) -> bool {
        if self.depth >= DEPTH_MAX {
            self.facts.truncated = true;
            return false;
        }
        self.depth += 1;
        true
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// A block in a scope of its own, with `names` declared first.
    fn scoped_block(&mut self, block: &Block, names: &[(&TokenReference, LocalKind)]) {
        self.open_scope();
        for (token, kind) in names {
            self.declare(token, *kind);
        }
        self.block(block);
        self.close_scope();
    }

    fn block(&mut self, block: &Block) {
        if !self.enter() {
            return;
        }
        let outer = self.dead.len();
        for stmt in block.stmts() {
            self.stmt(stmt);
            if let Some(dead) = self.exits(stmt) {
                self.dead.push(dead);
            }
        }
        if let Some(last) = block.last_stmt()
            && let LastStmt::Return(ret) = last
        {
            for expression in ret.returns() {
                self.expression(expression);
            }
        }
        self.dead.truncate(outer);
        self.leave();
    }

    fn stmt(&mut self, stmt: &Stmt) {
        match stmt {
            Stmt::Assignment(assignment) => {
                for expression in assignment.expressions() {
                    self.expression(expression);
                }
                for var in assignment.variables() {
                    self.assign(var);
                }
            }
            Stmt::Do(block) => self.scoped_block(block.block(), &[]),
            Stmt::FunctionCall(call) => self.call(call),
            Stmt::FunctionDeclaration(declaration) => {
                let names: Vec<&TokenReference> = declaration.name().names().iter().collect();
                let method = declaration.name().method_name();
                self.declared_function(&names, method);
                self.function_body(declaration.body(), method.is_some());
            }
            Stmt::GenericFor(generic) => {
                for expression in generic.expressions() {
                    self.expression(expression);
                }
                let names: Vec<(&TokenReference, LocalKind)> = generic
                    .names()
                    .iter()
                    .map(|name| (name, LocalKind::Quiet))
                    .collect();
                self.scoped_block(generic.block(), &names);
            }
            Stmt::If(branch) => {
                self.condition(branch.condition());
                self.scoped_block(branch.block(), &[]);
                for else_if in branch.else_if().into_iter().flatten() {
                    self.condition(else_if.condition());
                    self.scoped_block(else_if.block(), &[]);
                }
                if let Some(block) = branch.else_block() {
                    self.scoped_block(block, &[]);
                }
            }
            Stmt::LocalAssignment(local) => {
                for expression in local.expressions() {
                    self.expression(expression);
                }
                let attributes: Vec<Option<String>> = local
                    .attributes()
                    .map(|attribute| attribute.and_then(|a| name_of(a.name()).map(str::to_owned)))
                    .collect();
                for (index, name) in local.names().iter().enumerate() {
                    let close = attributes
                        .get(index)
                        .is_some_and(|a| a.as_deref() == Some("close"));
                    let kind = if close {
                        LocalKind::Quiet
                    } else {
                        LocalKind::Local
                    };
                    self.declare(name, kind);
                }
            }
            Stmt::LocalFunction(function) => {
                self.declare(function.name(), LocalKind::Local);
                if let Some(name) = name_of(function.name())
                    && self.always_raises(function.body().block(), name)
                {
                    self.raising.insert(name.to_owned());
                }
                self.function_body(function.body(), false);
            }
            Stmt::NumericFor(numeric) => {
                self.expression(numeric.start());
                self.expression(numeric.end());
                if let Some(step) = numeric.step() {
                    self.expression(step);
                }
                self.scoped_block(
                    numeric.block(),
                    &[(numeric.index_variable(), LocalKind::Quiet)],
                );
            }
            Stmt::Repeat(repeat) => {
                // The `until` condition sees the block's locals.
                self.open_scope();
                self.block(repeat.block());
                self.condition(repeat.until());
                self.close_scope();
            }
            Stmt::While(while_loop) => {
                self.condition(while_loop.condition());
                self.scoped_block(while_loop.block(), &[]);
            }
            // `goto` and labels name no variable.
            _ => {}
        }
    }

    /// Whether what follows `stmt` in its block may never run: after a
    /// call of the global `error`, or after `if NAME == nil then … return
    /// end` / `if not NAME then … return end` without other branches.
    fn exits(&self, stmt: &Stmt) -> Option<Dead> {
        match stmt {
            Stmt::FunctionCall(call) if self.raises(call, None) => Some(Dead::AfterError),
            Stmt::If(branch)
                if branch.else_if().is_none()
                    && branch.else_block().is_none()
                    && matches!(branch.block().last_stmt(), Some(LastStmt::Return(_))) =>
            {
                let tested = match branch.condition() {
                    Expression::UnaryOperator {
                        unop: full_moon::ast::UnOp::Not(_),
                        expression,
                    } => expression.as_ref(),
                    Expression::BinaryOperator { lhs, binop, rhs }
                        if matches!(binop, full_moon::ast::BinOp::TwoEqual(_))
                            && is_symbol(rhs, Symbol::Nil) =>
                    {
                        lhs.as_ref()
                    }
                    _ => return None,
                };
                let Expression::Var(var) = tested else {
                    return None;
                };
                let path = constant_path(var)?;
                if self.is_local(&path[0]) {
                    return None;
                }
                Some(Dead::Unless(path.join(".")))
            }
            _ => None,
        }
    }

    /// Whether `call` always raises: a call of the global `error`, of a
    /// local function known to raise on every path, or of `this` (the
    /// function being judged: a recursive call is taken to raise, the
    /// usual assumption of "never returns" inference).
    fn raises(&self, call: &FunctionCall, this: Option<&str>) -> bool {
        let (Prefix::Name(token), 1) = (call.prefix(), call.suffixes().count()) else {
            return false;
        };
        let Some(name) = name_of(token) else {
            return false;
        };
        if this == Some(name) || self.raising.contains(name) {
            return true;
        }
        name == "error" && !self.is_local("error")
    }

    /// Whether `block` raises on every path (no path reaches its end or a
    /// `return`/`break`): a statement that raises (a raising call, `return
    /// error(…)`, a `do` block or an `if` with an `else` whose every branch
    /// raises) before anything that could leave it.
    fn always_raises(&self, block: &Block, this: &str) -> bool {
        for stmt in block.stmts() {
            let raises = match stmt {
                Stmt::FunctionCall(call) => self.raises(call, Some(this)),
                Stmt::Do(inner) => self.always_raises(inner.block(), this),
                Stmt::If(branch) => {
                    branch
                        .else_block()
                        .is_some_and(|block| self.always_raises(block, this))
                        && self.always_raises(branch.block(), this)
                        && branch
                            .else_if()
                            .into_iter()
                            .flatten()
                            .all(|else_if| self.always_raises(else_if.block(), this))
                }
                _ => false,
            };
            if raises {
                return true;
            }
        }
        match block.last_stmt() {
            Some(LastStmt::Return(ret)) => {
                let mut values = ret.returns().iter();
                matches!(
                    (values.next(), values.next()),
                    (Some(Expression::FunctionCall(call)), None) if self.raises(call, Some(this))
                )
            }
            _ => false,
        }
    }

    /// `function a.b.c:m() … end` or `function f() … end`.
    fn declared_function(&mut self, names: &[&TokenReference], method: Option<&TokenReference>) {
        let Some((first, rest)) = names.split_first() else {
            return;
        };
        let Some(root) = name_of(first) else {
            return;
        };
        let members: Vec<(String, Span)> = rest
            .iter()
            .copied()
            .chain(method)
            .filter_map(|token| Some((name_of(token)?.to_owned(), span_of(token))))
            .collect();
        if members.is_empty() {
            // `function f()` assigns `f`: the local if one is visible.
            if self.find_local(root).is_none() {
                self.record(root.to_owned(), span_of(first), Vec::new(), Use::Write);
            }
            return;
        }
        if let Some(local) = self.find_local(root) {
            local.used = true;
            return;
        }
        self.record(root.to_owned(), span_of(first), members, Use::Write);
    }

    fn function_body(&mut self, body: &FunctionBody, method: bool) {
        if !self.enter() {
            return;
        }
        // A function written inside `pcall(…)`'s arguments is taken to run
        // under it (`pcall(function() … end)`), so its body counts as guarded.
        self.open_scope();
        if method {
            self.push_local(Local {
                name: "self".to_owned(),
                span: Span { start: 0, end: 0 },
                kind: LocalKind::Quiet,
                used: true,
            });
        }
        for parameter in body.parameters() {
            if let Parameter::Name(name) = parameter {
                self.declare(name, LocalKind::Quiet);
            }
        }
        self.block(body.block());
        self.close_scope();
        self.leave();
    }

    /// An assignment target.
    fn assign(&mut self, var: &Var) {
        match var {
            Var::Name(token) => {
                let Some(name) = name_of(token) else {
                    return;
                };
                if self.find_local(name).is_some() {
                    return;
                }
                self.record(name.to_owned(), span_of(token), Vec::new(), Use::Write);
            }
            Var::Expression(expression) => {
                let suffixes: Vec<&Suffix> = expression.suffixes().collect();
                self.chain(expression.prefix(), &suffixes, true);
            }
            _ => {}
        }
    }

    /// A prefix and its suffixes (`a.b.c(…)`, `a[x].y`): the global path
    /// as far as it is constant, then everything else walked as reads.
    /// `assigned`: the whole chain is an assignment target.
    fn chain(&mut self, prefix: &Prefix, suffixes: &[&Suffix], assigned: bool) {
        let root = match prefix {
            Prefix::Name(token) => name_of(token).map(|name| (name.to_owned(), span_of(token))),
            Prefix::Expression(expression) => {
                self.expression(expression);
                None
            }
            _ => None,
        };
        let mut rest = suffixes;
        if let Some((name, span)) = root {
            rest = self.global_chain(name, span, suffixes, assigned);
        }
        // Past the constant path: walk the remaining keys and arguments.
        for suffix in rest {
            match suffix {
                Suffix::Index(Index::Brackets { expression, .. }) => self.expression(expression),
                Suffix::Call(Call::AnonymousCall(args)) => self.arguments(args),
                Suffix::Call(Call::MethodCall(call)) => self.arguments(call.args()),
                _ => {}
            }
        }
    }

    /// Record the global path that starts at `name` (unless it is a local)
    /// and return the suffixes not consumed by it.
    fn global_chain<'s>(
        &mut self,
        name: String,
        span: Span,
        suffixes: &'s [&'s Suffix],
        assigned: bool,
    ) -> &'s [&'s Suffix] {
        if let Some(local) = self.find_local(&name) {
            local.used = true;
            return suffixes;
        }
        let mut members = Vec::new();
        let mut consumed = 0;
        let mut last = Use::Read;
        for suffix in suffixes {
            match suffix {
                Suffix::Index(index) => match constant_key(index) {
                    Some(member) => {
                        members.push(member);
                        consumed += 1;
                    }
                    None => {
                        last = Use::Index;
                        break;
                    }
                },
                Suffix::Call(Call::AnonymousCall(args)) => {
                    last = Use::Call(arguments(args, false));
                    break;
                }
                Suffix::Call(Call::MethodCall(call)) => {
                    if let Some(method) = name_of(call.name()) {
                        members.push((method.to_owned(), span_of(call.name())));
                    }
                    last = Use::Call(arguments(call.args(), true));
                    break;
                }
                _ => {
                    last = Use::Index;
                    break;
                }
            }
        }
        let whole = consumed == suffixes.len();
        if assigned && whole {
            last = Use::Write;
        }
        if matches!(name.as_str(), "_G" | "_ENV") && assigned && members.is_empty() {
            // `_G[k] = v`: any global may be defined.
            self.facts.dynamic_globals = true;
        }
        self.record(name, span, members, last);
        // The suffix that ended the path (a call, a key) is walked by the caller.
        &suffixes[consumed..]
    }

    /// Record one use of a global path; an assignment also defines it.
    /// `_G.x` and `_ENV.x` are the global `x`.
    fn record(&mut self, name: String, span: Span, members: Vec<(String, Span)>, last: Use) {
        let (name, span, members) = if matches!(name.as_str(), "_G" | "_ENV") && !members.is_empty()
        {
            let mut members = members;
            let (first, first_span) = members.remove(0);
            (first, first_span, members)
        } else {
            (name, span, members)
        };
        if last == Use::Write {
            if members.is_empty() {
                self.facts.defined_globals.insert(name.clone());
            } else {
                let mut path = name.clone();
                for (member, _) in &members {
                    path.push('.');
                    path.push_str(member);
                }
                self.facts.defined_members.insert(path);
            }
        }
        self.facts.accesses.push(Access {
            root: (name, span),
            members,
            last,
            in_pcall: self.pcall_depth > 0,
            dead: self.dead.clone(),
        });
    }

    fn call(&mut self, call: &FunctionCall) {
        let suffixes: Vec<&Suffix> = call.suffixes().collect();
        let callee = match call.prefix() {
            Prefix::Name(token) => name_of(token).filter(|name| {
                suffixes.len() == 1
                    && matches!(suffixes[0], Suffix::Call(Call::AnonymousCall(_)))
                    && !self.is_local(name)
            }),
            _ => None,
        };
        match callee {
            Some("pcall" | "xpcall") => {
                self.pcall_depth += 1;
                self.chain(call.prefix(), &suffixes, false);
                self.pcall_depth -= 1;
            }
            Some("type") => {
                if let Some(arguments) = parenthesized(suffixes[0]) {
                    for argument in arguments {
                        self.probe(argument);
                    }
                }
                self.chain(call.prefix(), &suffixes, false);
            }
            Some("setmetatable" | "rawset") => {
                if let Some(arguments) = parenthesized(suffixes[0])
                    && let Some(Expression::Var(Var::Name(first))) = arguments.iter().next()
                    && matches!(name_of(first), Some("_G" | "_ENV"))
                    && self
                        .find_local(name_of(first).unwrap_or_default())
                        .is_none()
                {
                    self.facts.dynamic_globals = true;
                }
                self.chain(call.prefix(), &suffixes, false);
            }
            _ => self.chain(call.prefix(), &suffixes, false),
        }
    }

    fn arguments(&mut self, args: &FunctionArgs) {
        match args {
            FunctionArgs::Parentheses { arguments, .. } => {
                for argument in arguments {
                    self.expression(argument);
                }
            }
            FunctionArgs::TableConstructor(table) => self.table(table),
            _ => {}
        }
    }

    fn table(&mut self, table: &full_moon::ast::TableConstructor) {
        for field in table.fields() {
            match field {
                Field::ExpressionKey { key, value, .. } => {
                    self.expression(key);
                    self.expression(value);
                }
                Field::NameKey { value, .. } => self.expression(value),
                Field::NoKey(value) => self.expression(value),
                _ => {}
            }
        }
    }

    /// A condition: probes what it tests, then is walked as an expression.
    fn condition(&mut self, expression: &Expression) {
        self.probe(expression);
        self.expression(expression);
    }

    /// Record the paths `expression` tests: itself when it is a constant
    /// path, and the operands of `and`, `or`, `not`, `==` and `~=`.
    fn probe(&mut self, expression: &Expression) {
        match expression {
            Expression::Var(var) => {
                if let Some(path) = constant_path(var) {
                    let mut prefix = String::new();
                    for (index, part) in path.iter().enumerate() {
                        if index > 0 {
                            prefix.push('.');
                        }
                        prefix.push_str(part);
                        self.facts.probed.insert(prefix.clone());
                    }
                    // `_G.x` tests the global `x`.
                    if matches!(path.first().map(String::as_str), Some("_G" | "_ENV"))
                        && path.len() > 1
                    {
                        self.facts.probed.insert(path[1..].join("."));
                    }
                }
            }
            Expression::Parentheses { expression, .. } => self.probe(expression),
            Expression::UnaryOperator { expression, .. } => self.probe(expression),
            Expression::BinaryOperator { lhs, binop, rhs } => {
                use full_moon::ast::BinOp;
                if matches!(
                    binop,
                    BinOp::And(_) | BinOp::Or(_) | BinOp::TwoEqual(_) | BinOp::TildeEqual(_)
                ) {
                    self.probe(lhs);
                    self.probe(rhs);
                }
            }
            Expression::FunctionCall(call) => {
                // `type(x) == "table"`
                if let Prefix::Name(token) = call.prefix()
                    && name_of(token) == Some("type")
                    && let Some(arguments) = call.suffixes().next().and_then(parenthesized)
                {
                    for argument in arguments {
                        self.probe(argument);
                    }
                }
            }
            _ => {}
        }
    }

    fn expression(&mut self, expression: &Expression) {
        if !self.enter() {
            return;
        }
        match expression {
            Expression::BinaryOperator { .. } => {
                // A left-associative chain (`a + b + c`) nests along its
                // left operands: walk that spine in a loop, not by
                // recursion (`super::depth` bounds its length).
                use full_moon::ast::BinOp;
                let mut spine = Vec::new();
                let mut leftmost = expression;
                while let Expression::BinaryOperator { lhs, binop, rhs } = leftmost {
                    spine.push((binop, rhs.as_ref()));
                    leftmost = lhs.as_ref();
                }
                let tested = spine
                    .iter()
                    .any(|(binop, _)| matches!(binop, BinOp::And(_) | BinOp::Or(_)));
                if tested {
                    self.probe(leftmost);
                }
                self.expression(leftmost);
                for (binop, rhs) in spine.into_iter().rev() {
                    if matches!(binop, BinOp::And(_) | BinOp::Or(_)) {
                        self.probe(rhs);
                    }
                    self.expression(rhs);
                }
            }
            Expression::Parentheses { expression, .. } => self.expression(expression),
            Expression::UnaryOperator { unop, expression } => {
                if matches!(unop, full_moon::ast::UnOp::Not(_)) {
                    self.probe(expression);
                }
                self.expression(expression);
            }
            Expression::Function(function) => self.function_body(function.body(), false),
            Expression::FunctionCall(call) => self.call(call),
            Expression::TableConstructor(table) => self.table(table),
            Expression::Var(var) => match var {
                Var::Name(token) => {
                    if let Some(name) = name_of(token) {
                        let span = span_of(token);
                        self.global_chain(name.to_owned(), span, &[], false);
                    }
                }
                Var::Expression(expression) => {
                    let suffixes: Vec<&Suffix> = expression.suffixes().collect();
                    self.chain(expression.prefix(), &suffixes, false);
                }
                _ => {}
            },
            _ => {}
        }
        self.leave();
    }
}

/// The arguments of a call written `f(…)`.
fn parenthesized(suffix: &Suffix) -> Option<&Punctuated<Expression>> {
    match suffix {
        Suffix::Call(Call::AnonymousCall(args)) => match args.as_ref() {
            FunctionArgs::Parentheses { arguments, .. } => Some(arguments),
            _ => None,
        },
        _ => None,
    }
}

/// The names of a constant path (`a.b["c"]`), if `var` is one.
fn constant_path(var: &Var) -> Option<Vec<String>> {
    match var {
        Var::Name(token) => Some(vec![name_of(token)?.to_owned()]),
        Var::Expression(expression) => {
            let Prefix::Name(root) = expression.prefix() else {
                return None;
            };
            let mut path = vec![name_of(root)?.to_owned()];
            for suffix in expression.suffixes() {
                let Suffix::Index(index) = suffix else {
                    return None;
                };
                path.push(constant_key(index)?.0);
            }
            Some(path)
        }
        _ => None,
    }
}
