//! Link the bench binary and benches with the link-time wrappers of the
//! worker crate (`reference-worker/src/vm_costs.rs`), which charge the Lua
//! VM's own long-string comparisons and string-to-number conversions
//! (SPEC §15.6). The bench runs the worker's VM in-process; the link fails
//! without the flags.

fn main() {
    for symbol in [
        "strcoll",
        "luaS_eqlngstr",
        "luaO_str2num",
        "lua_getstack",
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
        "lua_getinfo",
    ] {
        println!("cargo::rustc-link-arg=-Wl,--wrap={symbol}");
    }
    println!("cargo::rerun-if-changed=build.rs");
}
