//! With the `worker` feature, link every binary and test of this package
//! with the link-time wrappers of the worker crate
//! (`reference-worker/src/vm_costs.rs`), which charge the Lua VM's own
//! long-string comparisons and string-to-number conversions (SPEC §15.6);
//! the link fails without the flags once the worker is linked in.

fn main() {
    if std::env::var_os("CARGO_FEATURE_WORKER").is_some() {
        for symbol in [
            "strcoll",
            "luaS_eqlngstr",
            "luaO_str2num",
            "lua_getstack",
            "luaH_finishset",
            "luaH_set",
            "luaH_setint",
        ] {
            println!("cargo::rustc-link-arg=-Wl,--wrap={symbol}");
        }
    }
    println!("cargo::rerun-if-changed=build.rs");
}
