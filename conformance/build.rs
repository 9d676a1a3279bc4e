//! Embeds the suite's data in the runner, so that an installed or copied
//! `quirl-conformance` needs no source tree (SPEC.md §19):
//!
//! - every `conformance/cases/*.json` file (the directory is scanned, so a
//!   new case file is picked up without touching this script);
//! - `fixtures/manifest.json` and every file under `fixtures/frames/`;
//! - the SPEC.md revision marker (the `Revision:` line of its header) and a
//!   digest of the whole of SPEC.md, the protocol document
//!   (`src/spec_text.rs`; DESIGN.md and BENCHMARKS.md are not read), which
//!   `--version` names.
//!
//! The generated table lives in `$OUT_DIR/embedded.rs` and is included by
//! `src/embedded.rs`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[path = "src/spec_text.rs"]
#[allow(dead_code, reason = "the library's tests use the rest")]
mod spec_text;

fn main() {
    if let Err(error) = generate() {
        println!("cargo::error={error}");
        std::process::exit(1);
    }
}

fn generate() -> Result<(), String> {
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(env("OUT_DIR")?);
    let cases_dir = manifest_dir.join("cases");
    let repo = manifest_dir
        .parent()
        .ok_or("the crate has no parent directory")?
        .to_path_buf();
    let fixtures_dir = repo.join("fixtures");
    let spec_path = repo.join("SPEC.md");

    println!("cargo::rerun-if-changed={}", cases_dir.display());
    println!(
        "cargo::rerun-if-changed={}",
        fixtures_dir.join("manifest.json").display()
    );
    println!(
        "cargo::rerun-if-changed={}",
        fixtures_dir.join("frames").display()
    );
    println!("cargo::rerun-if-changed={}", spec_path.display());

    let case_files = sorted_files(&cases_dir, Some("json"))?;
    if case_files.is_empty() {
        return Err(format!("no case files in {}", cases_dir.display()));
    }
    let frames = sorted_files(&fixtures_dir.join("frames"), None)?;

    let mut out = String::new();
    out.push_str("/// Case files: (file name, text), sorted by name.\n");
    out.push_str("pub static CASE_FILES: &[(&str, &str)] = &[\n");
    for path in &case_files {
        println!("cargo::rerun-if-changed={}", path.display());
        writeln!(
            out,
            "    ({:?}, include_str!({:?})),",
            file_name(path)?,
            path_text(path)?
        )
        .map_err(|e| e.to_string())?;
    }
    out.push_str("];\n\n");

    out.push_str("/// The fixtures manifest text.\n");
    writeln!(
        out,
        "pub static FIXTURE_MANIFEST: &str = include_str!({:?});\n",
        path_text(&fixtures_dir.join("manifest.json"))?
    )
    .map_err(|e| e.to_string())?;

    out.push_str("/// Fixture files: (path relative to `fixtures/`, bytes), sorted.\n");
    out.push_str("pub static FIXTURE_FILES: &[(&str, &[u8])] = &[\n");
    for path in &frames {
        writeln!(
            out,
            "    (\"frames/{}\", include_bytes!({:?})),",
            file_name(path)?,
            path_text(path)?
        )
        .map_err(|e| e.to_string())?;
    }
    out.push_str("];\n\n");

    let spec = std::fs::read_to_string(&spec_path)
        .map_err(|error| format!("cannot read {}: {error}", spec_path.display()))?;
    let revision = spec_revision(&spec)
        .ok_or_else(|| format!("{}: no `Revision:` line in its header", spec_path.display()))?;
    writeln!(
        out,
        "/// The `Revision:` marker of the SPEC.md the suite was built from.\npub const SPEC_REVISION: &str = {revision:?};\n"
    )
    .map_err(|e| e.to_string())?;
    writeln!(
        out,
        "/// FNV-1a 64 digest of that SPEC.md, the whole protocol document (hex).\npub const SPEC_DIGEST: &str = \"{:016x}\";",
        spec_text::protocol_digest(&spec)
    )
    .map_err(|e| e.to_string())?;

    std::fs::write(out_dir.join("embedded.rs"), out)
        .map_err(|error| format!("cannot write embedded.rs: {error}"))
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set"))
}

/// The value of the first `Revision:` line among SPEC.md's first 40 lines.
fn spec_revision(spec: &str) -> Option<String> {
    spec.lines()
        .take(40)
        .find_map(|line| line.strip_prefix("Revision:"))
        .map(|rest| rest.trim().to_owned())
        .filter(|rest| !rest.is_empty())
}

/// Regular files of `dir` (optionally with extension `ext`), sorted by name.
fn sorted_files(dir: &Path, ext: Option<&str>) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|error| format!("cannot read {}: {error}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| format!("{}: {error}", dir.display()))?;
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        if ext.is_some_and(|ext| path.extension().and_then(|e| e.to_str()) != Some(ext)) {
            continue;
        }
        files.push(path);
    }
    files.sort();
    Ok(files)
}

fn file_name(path: &Path) -> Result<&str, String> {
    path.file_name()
        .and_then(|name| name.to_str())
        .ok_or_else(|| format!("{}: not a UTF-8 file name", path.display()))
}

fn path_text(path: &Path) -> Result<&str, String> {
    path.to_str()
        .ok_or_else(|| format!("{}: not a UTF-8 path", path.display()))
}
