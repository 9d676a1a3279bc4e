//! The binary locator (`quirl_lua_testkit::bins`) agrees with Cargo on
//! where this package's test doubles are, and fails loudly, never silently,
//! for a binary the build does not produce.

use std::path::PathBuf;

use quirl_lua_testkit::bins::{PACKAGE, bin_path, fake_worker, scripted_worker};

#[test]
fn the_locator_finds_the_binaries_cargo_built_for_this_test() {
    assert_eq!(
        fake_worker(),
        PathBuf::from(env!("CARGO_BIN_EXE_quirl-lua-fake-worker"))
    );
    assert_eq!(
        scripted_worker(),
        PathBuf::from(env!("CARGO_BIN_EXE_quirl-lua-scripted-worker"))
    );
}

#[test]
#[should_panic(expected = "did not produce")]
fn a_binary_the_package_does_not_have_panics() {
    bin_path(PACKAGE, "quirl-lua-no-such-binary");
}
