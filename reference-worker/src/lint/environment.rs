//! The lint's standard library: which globals and library members exist,
//! under which grants, and which of stock Lua 5.4's the sandbox leaves out.
//!
//! Nothing here is a hand-kept list. [`Tree::read`] reads a live Lua
//! state's globals (names, and the members of their library tables, those
//! holding functions, two levels deep); the reference data the lint starts from is such a reading of
//! the worker's own environments, committed as
//! `tests/snapshots/lint_environment.snap.json` and embedded here:
//!
//! - `sandbox`: a fresh sandbox without grants (`crate::vm::fresh_sandbox`,
//!   built as `Vm::new` builds one, the `quirl` table included);
//! - `capabilities`: for every worker capability, what a sandbox granted
//!   only that capability holds beyond `sandbox` (`lua.load`: `load`,
//!   `require`, `package`);
//! - `stock`: a Lua 5.4 state with every standard library, as stock Lua
//!   has them (the metered VM outside sandbox mode).
//!
//! A new Lua state cannot be made inside a worker that has locked itself
//! down (a state's string seed comes from `getrandom`, which the seccomp
//! filter refuses, DESIGN §18.3), which is why the readings are data and
//! not made at check time. The test `lint_environment` makes them again
//! from live states on every run and compares: for no grants, for each
//! capability alone and for all of them together, the environment the lint
//! derives here must equal what the live sandbox holds, so the two cannot
//! drift (regenerate with `INSTA_UPDATE=always cargo test -p
//! quirl-lua-reference-worker --test lint_environment`, then build again:
//! the reading is embedded at build time). At check time the
//! worker adds a reading of its own VM ([`Environment::with_live`]), so
//! globals and members earlier requests defined count as defined.

use mlua::{Lua, Table, Value};
use serde_json::{Map, Value as Json};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, OnceLock};

/// The committed reading (see the module docs).
const REFERENCE: &str = include_str!("../../tests/snapshots/lint_environment.snap.json");

/// Tables are listed with their members down to this depth (a global is
/// depth 1, `quirl.process` depth 2, `quirl.process.run` a member of it).
pub const TABLE_DEPTH_MAX: usize = 2;

/// A live reading stops after this many entries (a guest may have built a
/// huge global table); the reading is then incomplete.
pub const LIVE_ENTRIES_MAX: usize = 4096;

/// What a name holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A table with these string-keyed members.
    Table(Tree),
    /// A table whose members were not read (deeper than
    /// [`TABLE_DEPTH_MAX`], `_G`, or a table listed elsewhere).
    OpaqueTable,
    /// A function.
    Function,
    /// Another value, by its Lua type name (`string`, `number`, …).
    Value(String),
}

impl Entry {
    /// The members, when this is a listed table.
    pub fn members(&self) -> Option<&Tree> {
        match self {
            Entry::Table(tree) => Some(tree),
            _ => None,
        }
    }

    fn to_json(&self) -> Json {
        match self {
            Entry::Table(tree) => tree.to_json(),
            Entry::OpaqueTable => Json::from("table"),
            Entry::Function => Json::from("function"),
            Entry::Value(kind) => Json::from(kind.as_str()),
        }
    }

    fn from_json(value: &Json) -> Result<Self, String> {
        match value {
            Json::Object(_) => Tree::from_json(value).map(Entry::Table),
            Json::String(kind) => Ok(match kind.as_str() {
                "table" => Entry::OpaqueTable,
                "function" => Entry::Function,
                other => Entry::Value(other.to_owned()),
            }),
            other => Err(format!(
                "an entry must be a string or an object, not {other}"
            )),
        }
    }
}

/// The string-keyed members of a table (or the globals), by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    /// Name → what it holds.
    pub entries: BTreeMap<String, Entry>,
}

impl Tree {
    /// Read the globals of `lua`, at most `entries_max` entries (more make
    /// the reading [`Reading::complete`] false). Raw reads only: no
    /// metamethod runs, no Lua code runs.
    pub fn read(lua: &Lua, entries_max: usize) -> mlua::Result<Reading> {
        let globals = lua.globals();
        let mut reader = Reader {
            seen: HashSet::from([globals.to_pointer() as usize]),
            left: entries_max,
            complete: true,
        };
        let tree = reader.read(&globals, 1)?;
        Ok(Reading {
            tree,
            complete: reader.complete,
            dynamic: globals.metatable().is_some(),
        })
    }

    /// The entry at `path` (`["quirl", "process", "run"]`), if listed.
    pub fn get(&self, path: &[&str]) -> Option<&Entry> {
        let (first, rest) = path.split_first()?;
        let entry = self.entries.get(*first)?;
        if rest.is_empty() {
            return Some(entry);
        }
        entry.members()?.get(rest)
    }

    /// The JSON form of the committed reading: members by name; a table as
    /// an object of its members, an opaque table as `"table"`, a function
    /// as `"function"`, another value as its type name.
    pub fn to_json(&self) -> Json {
        Json::Object(
            self.entries
                .iter()
                .map(|(name, entry)| (name.clone(), entry.to_json()))
                .collect::<Map<String, Json>>(),
        )
    }

    /// Read the JSON form back.
    pub fn from_json(value: &Json) -> Result<Self, String> {
        let Json::Object(members) = value else {
            return Err("a table must be a JSON object".to_owned());
        };
        let mut entries = BTreeMap::new();
        for (name, value) in members {
            entries.insert(name.clone(), Entry::from_json(value)?);
        }
        Ok(Self { entries })
    }

    /// What `self` holds beyond `base`: names `base` lacks, and the
    /// additions inside tables both hold.
    pub fn beyond(&self, base: &Tree) -> Tree {
        let mut entries = BTreeMap::new();
        for (name, entry) in &self.entries {
            match (entry, base.entries.get(name)) {
                (_, None) => {
                    entries.insert(name.clone(), entry.clone());
                }
                (Entry::Table(mine), Some(Entry::Table(theirs))) => {
                    let more = mine.beyond(theirs);
                    if !more.entries.is_empty() {
                        entries.insert(name.clone(), Entry::Table(more));
                    }
                }
                _ => {}
            }
        }
        Tree { entries }
    }

    /// `self` with `more` added (tables merged member by member).
    pub fn merged(&self, more: &Tree) -> Tree {
        let mut entries = self.entries.clone();
        for (name, entry) in &more.entries {
            let merged = match (entries.get(name), entry) {
                (Some(Entry::Table(mine)), Entry::Table(theirs)) => {
                    Entry::Table(mine.merged(theirs))
                }
                _ => entry.clone(),
            };
            entries.insert(name.clone(), merged);
        }
        Tree { entries }
    }
}

/// A reading of a live state's globals.
#[derive(Debug, Clone)]
pub struct Reading {
    /// The globals.
    pub tree: Tree,
    /// Whether every entry was read (see [`LIVE_ENTRIES_MAX`]).
    pub complete: bool,
    /// Whether the globals table has a metatable: then any name may
    /// resolve (or fail) through it, and no name is certainly undefined.
    pub dynamic: bool,
}

struct Reader {
    /// Tables already listed or being listed (by address), so that each is
    /// listed once, at its shallowest path.
    seen: HashSet<usize>,
    left: usize,
    complete: bool,
}

impl Reader {
    /// The members of `table` at `depth`, breadth first: every table member
    /// is claimed before any is listed, so that a table reachable by two
    /// paths (`string` and `package.loaded.string`) is listed at the
    /// shorter one whatever the traversal order.
    fn read(&mut self, table: &Table, depth: usize) -> mlua::Result<Tree> {
        let mut members: Vec<(String, Value)> = Vec::new();
        for pair in table.pairs::<Value, Value>() {
            let (key, value) = pair?;
            if self.left == 0 {
                self.complete = false;
                break;
            }
            self.left -= 1;
            if let Value::String(name) = key
                && let Ok(name) = name.to_str()
            {
                members.push((name.to_owned(), value));
            }
        }
        members.sort_by(|a, b| a.0.cmp(&b.0));
        let mut listed: Vec<(String, Table)> = Vec::new();
        let mut entries = BTreeMap::new();
        for (name, value) in members {
            let entry = match value {
                Value::Table(member) => {
                    let fresh = self.seen.insert(member.to_pointer() as usize);
                    if fresh && depth <= TABLE_DEPTH_MAX && has_function(&member)? {
                        listed.push((name.clone(), member));
                        continue;
                    }
                    Entry::OpaqueTable
                }
                Value::Function(_) => Entry::Function,
                other => Entry::Value(lua_type(&other).to_owned()),
            };
            entries.insert(name, entry);
        }
        for (name, member) in listed {
            let tree = self.read(&member, depth + 1)?;
            entries.insert(name, Entry::Table(tree));
        }
        Ok(Tree { entries })
    }
}

/// Whether `table` holds a function under a string key: a library table,
/// whose members the lint lists and checks. A table of data
/// (`package.loaded`, `package.preload`) is read as opaque: its members
/// change as the program runs, and what it holds depends on other grants
/// (`package.loaded.os` exists with `lua.load` and `lua.os` together).
fn has_function(table: &Table) -> mlua::Result<bool> {
    for pair in table.pairs::<Value, Value>() {
        let (key, value) = pair?;
        if matches!((key, value), (Value::String(_), Value::Function(_))) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What Lua's `type` says of `value` (mlua names integers and light
/// userdata apart; Lua does not).
fn lua_type(value: &Value) -> &'static str {
    match value {
        Value::Nil => "nil",
        Value::Boolean(_) => "boolean",
        Value::Integer(_) | Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Table(_) => "table",
        Value::Function(_) => "function",
        Value::Thread(_) => "thread",
        _ => "userdata",
    }
}

/// The committed readings, parsed once.
#[derive(Debug)]
pub struct Reference {
    /// A sandbox without grants.
    pub sandbox: Tree,
    /// What each worker capability adds to `sandbox`, by grant string.
    pub capabilities: BTreeMap<String, Tree>,
    /// Stock Lua 5.4 with every standard library.
    pub stock: Tree,
}

impl Reference {
    /// The committed readings (parsed on first use).
    pub fn committed() -> Result<&'static Reference, String> {
        static PARSED: OnceLock<Result<Reference, String>> = OnceLock::new();
        PARSED
            .get_or_init(|| Self::parse(REFERENCE))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Parse the JSON form (`{"capabilities":{…},"sandbox":{…},"stock":{…}}`).
    pub fn parse(text: &str) -> Result<Reference, String> {
        let value: Json =
            serde_json::from_str(text).map_err(|e| format!("lint environment: {e}"))?;
        let part = |name: &str| {
            value
                .get(name)
                .ok_or_else(|| format!("lint environment: no `{name}`"))
        };
        let Json::Object(capabilities) = part("capabilities")? else {
            return Err("lint environment: `capabilities` is not an object".to_owned());
        };
        let mut parsed = BTreeMap::new();
        for (grant, tree) in capabilities {
            parsed.insert(grant.clone(), Tree::from_json(tree)?);
        }
        Ok(Reference {
            sandbox: Tree::from_json(part("sandbox")?)?,
            capabilities: parsed,
            stock: Tree::from_json(part("stock")?)?,
        })
    }

    /// The JSON form, pretty-printed (what the snapshot holds).
    pub fn to_json_text(&self) -> String {
        let capabilities: Map<String, Json> = self
            .capabilities
            .iter()
            .map(|(grant, tree)| (grant.clone(), tree.to_json()))
            .collect();
        let value = serde_json::json!({
            "capabilities": capabilities,
            "sandbox": self.sandbox.to_json(),
            "stock": self.stock.to_json(),
        });
        let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
        text.push('\n');
        text
    }

    /// What a sandbox granted `grants` holds: `sandbox` plus what each
    /// granted capability adds.
    pub fn sandbox_for(&self, grants: &HashSet<String>) -> Tree {
        self.capabilities
            .iter()
            .filter(|(grant, _)| grants.contains(*grant))
            .fold(self.sandbox.clone(), |tree, (_, more)| tree.merged(more))
    }
}

/// A library table: its standard members and what the VM holds there now.
#[derive(Debug, Clone, Copy)]
pub struct Library<'a> {
    standard: &'a Tree,
    live: Option<&'a Tree>,
}

impl<'a> Library<'a> {
    /// The member `name`.
    pub fn get(&self, name: &str) -> Option<&'a Entry> {
        self.standard
            .entries
            .get(name)
            .or_else(|| self.live.and_then(|live| live.entries.get(name)))
    }

    /// The entry at `path` below this table.
    pub fn get_path(&self, path: &[&str]) -> Option<&'a Entry> {
        self.standard
            .get(path)
            .or_else(|| self.live.and_then(|live| live.get(path)))
    }

    /// Every member name, sorted, once.
    pub fn names(&self) -> Vec<&'a str> {
        let mut names: Vec<&str> = self
            .standard
            .entries
            .keys()
            .chain(self.live.iter().flat_map(|live| live.entries.keys()))
            .map(String::as_str)
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// Everything the lint knows about the environment of one check.
#[derive(Debug, Clone)]
pub struct Environment {
    /// What a fresh sandbox for the request's grants holds: its tables
    /// with functions are the library tables whose members are checked.
    pub standard: Arc<Tree>,
    /// Stock Lua 5.4 (what the sandbox leaves out is named as such).
    pub stock: Arc<Tree>,
    /// What each capability not granted would add (for "grant X adds it").
    pub not_granted: Arc<BTreeMap<String, Tree>>,
    /// The VM's own globals now (what earlier requests defined), if read.
    pub live: Option<Tree>,
    /// Whether every name that exists is known: false when the live
    /// reading was cut short or the globals table has a metatable. Then
    /// an unknown name is never an error.
    pub names_complete: bool,
}

impl Environment {
    /// The environment of a fresh sandbox granted `grants`, from the
    /// committed readings.
    pub fn for_grants(grants: &HashSet<String>) -> Result<Self, String> {
        let reference = Reference::committed()?;
        Ok(Self::from_reference(reference, grants))
    }

    /// The environment of a sandbox granted `grants`, from `reference`.
    pub fn from_reference(reference: &Reference, grants: &HashSet<String>) -> Self {
        let not_granted = reference
            .capabilities
            .iter()
            .filter(|(grant, _)| !grants.contains(*grant))
            .map(|(grant, tree)| (grant.clone(), tree.clone()))
            .collect();
        Self {
            standard: Arc::new(reference.sandbox_for(grants)),
            stock: Arc::new(reference.stock.clone()),
            not_granted: Arc::new(not_granted),
            live: None,
            names_complete: true,
        }
    }

    /// Stock Lua 5.4's environment (every standard library, no sandbox):
    /// for code that runs outside the sandbox, such as Lua's own tests.
    pub fn stock() -> Result<Self, String> {
        let reference = Reference::committed()?;
        Ok(Self {
            standard: Arc::new(reference.stock.clone()),
            stock: Arc::new(reference.stock.clone()),
            not_granted: Arc::new(BTreeMap::new()),
            live: None,
            names_complete: true,
        })
    }

    /// Add a reading of the VM's own globals.
    #[must_use]
    pub fn with_live(mut self, reading: Reading) -> Self {
        self.names_complete &= reading.complete && !reading.dynamic;
        self.live = Some(reading.tree);
        self
    }

    /// Whether a global `name` exists (standard or live).
    pub fn has_global(&self, name: &str) -> bool {
        self.standard.entries.contains_key(name)
            || self
                .live
                .as_ref()
                .is_some_and(|live| live.entries.contains_key(name))
    }

    /// Every global name (standard and live), for suggestions.
    pub fn global_names(&self) -> impl Iterator<Item = &str> {
        self.standard
            .entries
            .keys()
            .chain(self.live.iter().flat_map(|live| live.entries.keys()))
            .map(String::as_str)
    }

    /// The library table at `path` (`["quirl"]`, `["quirl", "process"]`):
    /// a table of the standard environment that holds at least one function
    /// (so `package.loaded`, a table of data, is none). Its members are
    /// the standard ones plus what the live reading holds there.
    pub fn library(&self, path: &[&str]) -> Option<Library<'_>> {
        let standard = self.standard.get(path)?.members()?;
        if !standard
            .entries
            .values()
            .any(|entry| matches!(entry, Entry::Function))
        {
            return None;
        }
        let live = match self.live.as_ref().and_then(|live| live.get(path)) {
            Some(Entry::Table(live)) => Some(live),
            // Replaced by something else: not the library any more.
            Some(_) => return None,
            None => None,
        };
        Some(Library { standard, live })
    }

    /// The capability not granted that would add `path`, stock or not.
    pub fn granted_by(&self, path: &[&str]) -> Option<&str> {
        self.not_granted
            .iter()
            .find(|(_, tree)| tree.get(path).is_some())
            .map(|(grant, _)| grant.as_str())
    }
}

/// The worker capabilities the readings cover: every grant string the
/// worker knows (`sandbox::grants::KNOWN_GRANTS`, SPEC §7.1), which
/// includes the sandbox's capabilities
/// (`sandbox::capabilities::SANDBOX_CAPABILITIES`: `lua.load`, `lua.os`,
/// `lua.io`). Most add nothing to the globals; the readings say so.
pub fn known_capabilities() -> Vec<String> {
    let mut known: Vec<String> = crate::sandbox::grants::KNOWN_GRANTS
        .iter()
        .map(|grant| (*grant).to_owned())
        .chain(
            crate::sandbox::capabilities::SANDBOX_CAPABILITIES
                .iter()
                .map(|capability| capability.grant.to_owned()),
        )
        .collect();
    known.sort();
    known.dedup();
    known
}

/// Read a fresh sandbox granted `grants` (built as `Vm::new` builds one).
/// Makes a Lua state: not for a worker that has locked itself down.
pub fn read_fresh_sandbox(grants: &HashSet<String>) -> mlua::Result<Reading> {
    let lua = crate::vm::fresh_sandbox(grants)?;
    Tree::read(&lua, usize::MAX)
}

/// Read stock Lua 5.4 with every standard library (the metered VM outside
/// sandbox mode). Makes a Lua state: not for a worker that has locked
/// itself down.
pub fn read_stock() -> mlua::Result<Reading> {
    // SAFETY: `unsafe_new_with` is unsafe because it opens `debug`, whose
    // functions can break the state's invariants when Lua code calls them.
    // No Lua code runs in this state: its globals are read (raw, no
    // metamethods) and it is dropped.
    let lua = unsafe { Lua::unsafe_new_with(mlua::StdLib::ALL, mlua::LuaOptions::new()) };
    Tree::read(&lua, usize::MAX)
}

impl Reference {
    /// Make the readings from live states: a sandbox without grants, one
    /// granted each of `capabilities` alone, and stock Lua. Makes Lua
    /// states: not for a worker that has locked itself down.
    pub fn generate(capabilities: &[String]) -> mlua::Result<Reference> {
        let sandbox = read_fresh_sandbox(&HashSet::new())?.tree;
        let mut added = BTreeMap::new();
        for capability in capabilities {
            let granted = read_fresh_sandbox(&HashSet::from([capability.clone()]))?.tree;
            added.insert(capability.clone(), granted.beyond(&sandbox));
        }
        Ok(Reference {
            sandbox,
            capabilities: added,
            stock: read_stock()?.tree,
        })
    }
}
