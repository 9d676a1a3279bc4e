//! Tests that need something of the machine — a writable cgroup v2
//! hierarchy, Landlock — skip where it is missing, saying why, unless the
//! run requires it: `QUIRL_TEST_REQUIRE` lists what must be present
//! (`cgroup`, `landlock`, comma-separated), and `.ci/run` sets it to what
//! the machine offers, so a test that skips there fails instead.

/// The variable that names what a run requires.
pub const REQUIRE_VARIABLE: &str = "QUIRL_TEST_REQUIRE";

/// `test` cannot run because `need` is missing (`why`): prints a skip line,
/// or panics when [`REQUIRE_VARIABLE`] names `need`.
pub fn skip(need: &str, test: &str, why: &str) {
    let required = std::env::var(REQUIRE_VARIABLE).unwrap_or_default();
    let is_required = required.split(',').any(|name| name.trim() == need);
    assert!(
        !is_required,
        "{test} needs {need}, which {REQUIRE_VARIABLE} requires: {why}"
    );
    eprintln!("SKIPPED {test}: {why}");
}
