//! With the `worker` feature, link every binary and test of this package
//! with the link-time wrappers of the worker crate
//! (`reference-worker/src/vm_costs.rs`, SPEC §15.6), whose list the worker's
//! build script passes on (its `links` key); without the feature the worker
//! is not linked and there is no list.

fn main() {
    println!("cargo::rerun-if-env-changed=DEP_QUIRL_LUA_VM_COSTS_SYMBOLS");
    if let Ok(symbols) = std::env::var("DEP_QUIRL_LUA_VM_COSTS_SYMBOLS") {
        for symbol in symbols.split(',') {
            println!("cargo::rustc-link-arg=-Wl,--wrap={symbol}");
        }
    }
    println!("cargo::rerun-if-changed=build.rs");
}
