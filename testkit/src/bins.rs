//! Where the binaries of other workspace packages are, for tests and
//! benches that run them (`CARGO_BIN_EXE_*` names only the binaries of the
//! test's own package).
//!
//! A test or bench executable lives in `target/<profile>/deps/`; the
//! binaries built with it are in `target/<profile>/`.

use std::path::PathBuf;

/// The binary `name` of package `package`, built into the same target
/// directory as the running test or bench. Panics with the command that
/// builds it when it is missing: a test never skips because a binary is
/// absent.
pub fn bin_path(package: &str, name: &str) -> PathBuf {
    let dir = match profile_dir() {
        Ok(dir) => dir,
        Err(error) => panic!("cannot locate the target directory of this test: {error}"),
    };
    let path = dir.join(name);
    if !path.is_file() {
        panic!(
            "{} is missing; build it with `cargo build -p {package} --bins` (same profile as this test)",
            path.display()
        );
    }
    path
}

/// `target/<profile>/` of the running executable.
fn profile_dir() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let mut dir = exe
        .parent()
        .ok_or_else(|| std::io::Error::other("the executable has no parent directory"))?
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    Ok(dir)
}
