//! The binaries of workspace packages, for the tests and benches that run
//! them: this crate's test doubles and the products' own binaries.
//!
//! `CARGO_BIN_EXE_*` names only the binaries of the test's own package, so a
//! test of another package asks [`bin_path`]. It runs `cargo build -p
//! PACKAGE --bins` once per process and package, with the running test's
//! profile and target directory (a test or bench executable lives in
//! `target/[<triple>/]<profile>/deps/`, the binaries one level up), so the
//! binary is never stale and never missing: a failed build panics with
//! Cargo's output, no test skips. The build is a no-op when the binaries are
//! fresh. `CARGO` (set by Cargo for the processes it runs) names the Cargo to
//! use; `cargo` from `PATH` otherwise.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

/// This crate's package, whose binaries are the test doubles.
pub const PACKAGE: &str = "quirl-lua-testkit";

/// `quirl-lua-fake-worker SCENARIO [PARAM]`: the scripted hostile worker of
/// the supervision tests (`src/bin/fake_worker.rs`).
pub fn fake_worker() -> PathBuf {
    bin_path(PACKAGE, "quirl-lua-fake-worker")
}

/// `quirl-lua-scripted-worker`: the test double of the lifecycle tests
/// (`src/bin/scripted_worker.rs`).
pub fn scripted_worker() -> PathBuf {
    bin_path(PACKAGE, "quirl-lua-scripted-worker")
}

/// The binary `name` of workspace package `package`, built (once per
/// process) with the running test's profile into its target directory.
///
/// # Panics
///
/// When the target directory cannot be derived from the running
/// executable, the build fails, or the build does not produce `name`.
pub fn bin_path(package: &str, name: &str) -> PathBuf {
    built(package, &["--bins"], Path::new(name))
}

/// The example `name` of workspace package `package`, built like
/// [`bin_path`] (`cargo build -p PACKAGE --example NAME`).
///
/// # Panics
///
/// As [`bin_path`].
pub fn example_path(package: &str, name: &str) -> PathBuf {
    built(
        package,
        &["--example", name],
        &Path::new("examples").join(name),
    )
}

/// Build `package` with `targets` once per process; the path of `output`
/// under `target/<profile>/`.
fn built(package: &str, targets: &[&str], output: &Path) -> PathBuf {
    let dir = match profile_dir() {
        Ok(dir) => dir,
        Err(error) => panic!("cannot derive the target directory of this test: {error}"),
    };
    static BUILT: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let key = format!("{package} {}", targets.join(" "));
    // Held during the build: concurrent tests of this process wait for it.
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    if !built.contains(&key) {
        if let Err(error) = build(package, targets, &dir) {
            panic!("building {key} for this test failed: {error}");
        }
        built.insert(key.clone());
    }
    let path = dir.join(output);
    if !path.is_file() {
        panic!("`cargo build -p {key}` did not produce {}", path.display());
    }
    path
}

/// `target/<profile>/` of the running executable.
fn profile_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|error| format!("current_exe: {error}"))?;
    let mut dir = exe
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", exe.display()))?
        .to_path_buf();
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir.pop();
    }
    Ok(dir)
}

/// `cargo build -p PACKAGE TARGETS…` into `dir`: `target/<profile>/`, or
/// `target/<triple>/<profile>/` for a build with an explicit target (then
/// `--target <triple>` is passed on).
fn build(package: &str, targets: &[&str], dir: &Path) -> Result<(), String> {
    let mut target_dir = dir
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", dir.display()))?;
    let triple = option_env!("QUIRL_TESTKIT_TARGET")
        .filter(|triple| target_dir.file_name().is_some_and(|name| name == *triple));
    if triple.is_some() {
        target_dir = target_dir
            .parent()
            .ok_or_else(|| format!("{} has no parent directory", target_dir.display()))?;
    }
    let profile = dir
        .file_name()
        .and_then(|name| name.to_str())
        .ok_or_else(|| format!("{} names no profile", dir.display()))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args(["build", "--quiet", "-p", package])
        .args(targets)
        .arg("--target-dir")
        .arg(target_dir)
        .args(triple.iter().flat_map(|triple| ["--target", triple]))
        // Any directory of the workspace: this crate's own.
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match profile {
        "debug" => {}
        "release" => {
            command.arg("--release");
        }
        other => {
            command.args(["--profile", other]);
        }
    }
    let output = command
        .output()
        .map_err(|error| format!("cannot run cargo: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{:?} ended with {}:\n{}",
            command,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}
