//! Link the fuzz targets with the worker crate's link-time wrappers
//! (`reference-worker/src/vm_costs.rs`, SPEC §15.6); the link fails without
//! them.

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
