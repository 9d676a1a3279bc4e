//! The unit tests' form of the test kit's `environment::skip` (the kit is
//! not a dependency of the published package): a test whose machine lacks
//! `need` skips, unless `QUIRL_TEST_REQUIRE` names it (`.ci/run`).

pub(crate) fn skip(need: &str, test: &str, why: &str) {
    let required = std::env::var("QUIRL_TEST_REQUIRE").unwrap_or_default();
    let is_required = required.split(',').any(|name| name.trim() == need);
    assert!(
        !is_required,
        "{test} needs {need}, which the run requires: {why}"
    );
    eprintln!("SKIPPED {test}: {why}");
}
