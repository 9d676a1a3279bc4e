//! Link every binary, test and bench of this package with the link-time
//! wrappers of `src/vm_costs.rs`, which charge the Lua VM's own long-string
//! comparisons and string-to-number conversions (SPEC §15.6). Any other
//! package that links this crate into a binary needs the same flags (the
//! link fails without them).

fn main() {
    for symbol in ["strcoll", "luaS_eqlngstr", "luaO_str2num"] {
        println!("cargo::rustc-link-arg=-Wl,--wrap={symbol}");
    }
    println!("cargo::rerun-if-changed=build.rs");
}
