//! Build-time work of the worker package:
//!
//! 1. Link every binary, test and bench of this package with the link-time
//!    wrappers of `src/vm_costs.rs`, which charge the Lua VM's own
//!    long-string comparisons and string-to-number conversions (SPEC
//!    §15.6). Any other package that links this crate into a binary needs
//!    the same flags (the link fails without them).
//! 2. Compile the trusted Lua the worker runs while it builds its VM (the
//!    prelude `src/sandbox.lua` and the pattern glue
//!    `src/pattern/strings.lua`) to Lua 5.4 bytecode, with debug
//!    information (error positions such as `sandbox:239:` are part of the
//!    library-call rewriting, SPEC §15.11), into `OUT_DIR`. The worker loads
//!    these with its own trusted loader before any guest code exists, which
//!    saves parsing ~950 lines of Lua at every cold start (BENCHMARKS.md,
//!    "Cold start breakdown"); guests still cannot load bytecode (SPEC
//!    §15.1, §15.3). The compiler is the same vendored Lua the worker links (the
//!    build dependency resolves to the same `mlua`/`lua-src` versions in
//!    Cargo.lock), and Lua's own header check refuses a chunk built for
//!    another Lua version or number format when the worker loads it.

use mlua::chunk::ChunkMode;
use mlua::{Lua, LuaOptions, StdLib};
use std::path::{Path, PathBuf};

/// The Lua functions whose calls the linker sends to the `__wrap_`
/// functions of `src/vm_costs.rs` (which states the rule for adding one).
const WRAPPED_SYMBOLS: &[&str] = &[
    "strcoll",
    "luaS_eqlngstr",
    "luaO_str2num",
    "lua_getstack",
    "lua_getinfo",
    "luaH_finishset",
    "lua_rawset",
    "lua_rawseti",
    "lua_rawsetp",
    "luaT_gettm",
    "luaT_getvarargs",
    "luaG_typeerror",
    "luaG_callerror",
    "luaG_concaterror",
    "luaG_opinterror",
    "luaG_tointerror",
];

/// Trusted chunks: (source path, chunk name, output file).
const CHUNKS: &[(&str, &str, &str)] = &[
    ("src/sandbox.lua", "=sandbox", "sandbox.luac"),
    ("src/pattern/strings.lua", "=sandbox", "strings.luac"),
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for symbol in WRAPPED_SYMBOLS {
        println!("cargo::rustc-link-arg=-Wl,--wrap={symbol}");
    }
    // The same list for every package that links this crate (their build
    // scripts read it as DEP_QUIRL_LUA_VM_COSTS_SYMBOLS, through the
    // `links` key) and for `vm_costs::WRAPPED_SYMBOLS`.
    let list = WRAPPED_SYMBOLS.join(",");
    println!("cargo::metadata=symbols={list}");
    println!("cargo::rustc-env=QUIRL_LUA_WRAPPED_SYMBOLS={list}");
    println!("cargo::rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    // Compiling needs no library at all; the state only parses.
    let lua = Lua::new_with(StdLib::NONE, LuaOptions::new())?;
    for (source, name, output) in CHUNKS {
        println!("cargo::rerun-if-changed={source}");
        let text = std::fs::read_to_string(Path::new(source))?;
        let function = lua
            .load(text.as_str())
            .set_name(*name)
            .set_mode(ChunkMode::Text)
            .into_function()
            .map_err(|e| format!("{source} does not compile: {e}"))?;
        std::fs::write(out.join(output), function.dump(false))?;
    }
    Ok(())
}
