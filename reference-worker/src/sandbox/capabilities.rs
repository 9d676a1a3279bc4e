//! The worker capabilities that change the sandbox (SPEC §7.1, DESIGN
//! §15.3), in one place: each grant string, the globals it adds to
//! [`GLOBALS`](super::GLOBALS) and the members of the tables it adds.
//!
//! This is the list a tool that needs the sandbox's global set per grant
//! reads (a linter of guest code, the CLI's `--grant` check); the sandbox
//! builds its environment from it ([`SandboxOptions::from_grants`],
//! `super::build_with`) and tests compare it with the live globals
//! (`tests/lua_os.rs`, `tests/lua_io.rs`, `tests/lua_load.rs`). It is not
//! about the SDK's registration grants (`super::grants`).

/// The grant that keeps Lua's `load`, `require` and a pruned `package`
/// (DESIGN §15.3 "The `lua.load` capability").
pub const LUA_LOAD_GRANT: &str = "lua.load";
/// The grant that adds `os` with the clock, dates, `getenv` over the
/// declared environment and `exit` (DESIGN §15.3 "The `lua.os`
/// capability").
pub const LUA_OS_GRANT: &str = "lua.os";
/// The grant that adds `io` over the request's standard streams and
/// `print` (DESIGN §15.3 "The `lua.io` capability").
pub const LUA_IO_GRANT: &str = "lua.io";

/// One worker capability of the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxCapability {
    /// The grant string of `initialize` (SPEC §7.1).
    pub grant: &'static str,
    /// What it enables, in a sentence.
    pub summary: &'static str,
    /// The globals it adds, sorted.
    pub globals: &'static [&'static str],
    /// The members of each table among [`Self::globals`], sorted.
    pub members: &'static [(&'static str, &'static [&'static str])],
}

/// The members of `package` under [`LUA_LOAD_GRANT`]; `path`, `cpath`,
/// `config`, `loadlib` and `searchpath` are removed.
pub const PACKAGE_MEMBERS: &[&str] = &["loaded", "preload", "searchers"];

/// The members of `os` under [`LUA_OS_GRANT`]; `execute`, `remove`,
/// `rename`, `tmpname` and `setlocale` stay absent.
pub const OS_MEMBERS: &[&str] = &["clock", "date", "difftime", "exit", "getenv", "time"];

/// The members of `io` under [`LUA_IO_GRANT`]: every member of Lua's
/// `io`; those that would open a file or a process (`open`, `popen`,
/// `tmpfile`, and `input`, `output` and `lines` given a file name) answer
/// as Lua does when the system refuses.
pub const IO_MEMBERS: &[&str] = &[
    "close", "flush", "input", "lines", "open", "output", "popen", "read", "stderr", "stdin",
    "stdout", "tmpfile", "type", "write",
];

/// The methods of a file handle (`io.stdout:write`, …) under
/// [`LUA_IO_GRANT`], as Lua's.
pub const FILE_METHODS: &[&str] = &[
    "close", "flush", "lines", "read", "seek", "setvbuf", "write",
];

/// Every worker capability of the sandbox, by grant string.
pub const SANDBOX_CAPABILITIES: &[SandboxCapability] = &[
    SandboxCapability {
        grant: LUA_LOAD_GRANT,
        summary: "Lua's `load` (text chunks only, compiling charged) and `require` over `package.preload` and `package.loaded`",
        globals: &["load", "package", "require"],
        members: &[("package", PACKAGE_MEMBERS)],
    },
    SandboxCapability {
        grant: LUA_OS_GRANT,
        summary: "`os.time`, `os.clock`, `os.date`, `os.difftime` on the host's clock, `os.getenv` over the environment the request declares, and `os.exit`",
        globals: &["os"],
        members: &[("os", OS_MEMBERS)],
    },
    SandboxCapability {
        grant: LUA_IO_GRANT,
        summary: "`print` and `io` over the request's standard streams: output captured like a process's, input the runner's stdin; files and processes refused",
        globals: &["io", "print"],
        members: &[("io", IO_MEMBERS)],
    },
];

/// The capability granted by `grant`, if it is one of the sandbox's.
pub fn sandbox_capability(grant: &str) -> Option<&'static SandboxCapability> {
    SANDBOX_CAPABILITIES.iter().find(|c| c.grant == grant)
}

/// What a sandbox is built with besides the meter: which of the
/// [`SANDBOX_CAPABILITIES`] it has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SandboxOptions {
    /// Keep `load`, `require` and `package` ([`LUA_LOAD_GRANT`]).
    pub lua_load: bool,
    /// Add `os` ([`LUA_OS_GRANT`]).
    pub lua_os: bool,
    /// Add `io` and `print` ([`LUA_IO_GRANT`]).
    pub lua_io: bool,
}

impl SandboxOptions {
    /// The options the grant strings `grants` select (unknown strings
    /// select nothing, SPEC §7.1).
    pub fn from_grants<'a>(grants: impl IntoIterator<Item = &'a str>) -> Self {
        let mut options = Self::default();
        for grant in grants {
            match grant {
                LUA_LOAD_GRANT => options.lua_load = true,
                LUA_OS_GRANT => options.lua_os = true,
                LUA_IO_GRANT => options.lua_io = true,
                _ => {}
            }
        }
        options
    }

    /// The grant strings of the capabilities these options hold.
    pub fn grants(self) -> Vec<&'static str> {
        [
            (self.lua_load, LUA_LOAD_GRANT),
            (self.lua_os, LUA_OS_GRANT),
            (self.lua_io, LUA_IO_GRANT),
        ]
        .into_iter()
        .filter_map(|(on, grant)| on.then_some(grant))
        .collect()
    }

    /// Every global the sandbox has with these options (with the SDK's
    /// `quirl`), sorted: [`GLOBALS`](super::GLOBALS) and what each granted
    /// capability adds.
    pub fn globals(self) -> Vec<&'static str> {
        let mut globals: Vec<&'static str> = super::GLOBALS.to_vec();
        for grant in self.grants() {
            if let Some(capability) = sandbox_capability(grant) {
                globals.extend_from_slice(capability.globals);
            }
        }
        globals.sort_unstable();
        globals
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn each_capability_lists_sorted_globals_and_members_of_its_own_tables() {
        for capability in SANDBOX_CAPABILITIES {
            assert!(capability.globals.is_sorted(), "{}", capability.grant);
            for (table, members) in capability.members {
                assert!(capability.globals.contains(table), "{}", capability.grant);
                assert!(members.is_sorted(), "{table}");
            }
            assert!(
                !super::super::GLOBALS
                    .iter()
                    .any(|g| capability.globals.contains(g))
            );
            assert_eq!(
                SandboxOptions::from_grants([capability.grant]).grants(),
                vec![capability.grant]
            );
        }
        assert!(FILE_METHODS.is_sorted());
    }

    #[test]
    fn unknown_grants_select_nothing() {
        assert_eq!(
            SandboxOptions::from_grants(["lua.laod", "os", "io", "lua.*", "LUA.IO"]),
            SandboxOptions::default()
        );
        let all = SandboxOptions::from_grants(["lua.io", "lua.os", "lua.load"]);
        assert_eq!(all.grants(), vec!["lua.load", "lua.os", "lua.io"]);
        assert!(all.globals().contains(&"print") && all.globals().is_sorted());
    }
}
