//! Records the target triple this crate is built for, so that
//! `bins::build` can tell `target/<profile>/` from
//! `target/<triple>/<profile>/` (a build with an explicit target, as the
//! workspace's `.cargo/config.toml` asks for).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Ok(target) = std::env::var("TARGET") {
        println!("cargo:rustc-env=QUIRL_TESTKIT_TARGET={target}");
    }
}
