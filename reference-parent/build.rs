//! Link every binary, test and bench of this package with the link-time
//! wrappers of the worker crate (`reference-worker/src/vm_costs.rs`, SPEC
//! §15.6), whose list the worker's build script passes on (its `links`
//! key). `quirl-lua` runs the worker in-process too; the link fails without
//! the flags.

fn main() {
    println!("cargo::rerun-if-env-changed=DEP_QUIRL_LUA_VM_COSTS_SYMBOLS");
    match std::env::var("DEP_QUIRL_LUA_VM_COSTS_SYMBOLS") {
        Ok(symbols) => {
            for symbol in symbols.split(',') {
                println!("cargo::rustc-link-arg=-Wl,--wrap={symbol}");
            }
        }
        Err(_) => println!(
            "cargo::error=the worker crate did not pass its list of link-time wrappers (DEP_QUIRL_LUA_VM_COSTS_SYMBOLS)"
        ),
    }
    println!("cargo::rerun-if-changed=build.rs");
}
