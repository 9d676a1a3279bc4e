//! Builds the metered Lua 5.4 (README.md): the sources of the pinned
//! `lua-src` registry package, our patch applied to a copy in `OUT_DIR`,
//! our meter (`c/`), compiled with lua-src's own flags and linked whole into
//! every binary that links this crate (mlua-sys's `external` feature leaves
//! the linking to us).
//!
//! Fails the build, with what to do, when the sources are not exactly the
//! release the patch was validated against (`patches/SOURCES.sha256`) or a
//! hunk no longer applies. Nothing of Lua's is in this repository: the
//! sources come from the registry package, the patch is our code.

use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The registry package and the Lua release inside it.
const LUA_SRC_PACKAGE: &str = "lua-src";
const LUA_SRC_VERSION: &str = "551.0.2";
const LUA_RELEASE_DIR: &str = "lua-5.4.9";
/// The static library this script builds.
const LIBRARY: &str = "quirl_lua54_metered";
/// The unpatched library of the `stock-baseline` feature.
const STOCK_LIBRARY: &str = "quirl_lua54_stock";

type BuildResult<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    if let Err(error) = build() {
        // One line per cause: cargo shows `cargo::error` lines as errors.
        for line in error.to_string().lines() {
            println!("cargo::error={line}");
        }
        std::process::exit(1);
    }
}

fn build() -> BuildResult<()> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=patches");
    println!("cargo::rerun-if-changed=c");

    let sources = lua_sources(&manifest)?;
    check_release(&manifest, &sources)?;
    let work = out.join("lua");
    if work.exists() {
        std::fs::remove_dir_all(&work)?;
    }
    std::fs::create_dir_all(&work)?;
    for entry in std::fs::read_dir(&sources)? {
        let path = entry?.path();
        if let Some(name) = path.file_name() {
            std::fs::copy(&path, work.join(name))?;
        }
    }
    apply_patches(&manifest.join("patches"), &work)?;
    for entry in std::fs::read_dir(manifest.join("c"))? {
        let path = entry?.path();
        if let Some(name) = path.file_name() {
            std::fs::copy(&path, work.join(name))?;
        }
    }
    compile(&work)?;
    println!("cargo::metadata=include={}", work.display());
    // The patched sources, for the loop inventory (tests/loop_inventory).
    println!(
        "cargo::rustc-env=QUIRL_METERED_LUA_PATCHED={}",
        work.display()
    );
    if std::env::var_os("CARGO_FEATURE_STOCK_BASELINE").is_some() {
        build_stock_baseline(&manifest, &sources, &out)?;
    }
    Ok(())
}

/// The `stock-baseline` feature: the same verified sources, none of our
/// patch, compiled with the flags of the metered library at `-O3` into a
/// standalone interpreter (`stock/stock_lua.c`, our own minimal main:
/// lua-src ships none), whose path the crate exports as `STOCK_LUA`. The
/// benchmarks and differential tests compare the metered VM against it.
fn build_stock_baseline(manifest: &Path, sources: &Path, out: &Path) -> BuildResult<()> {
    println!("cargo::rerun-if-changed=stock");
    let mut files: Vec<PathBuf> = std::fs::read_dir(sources)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "c"))
        .collect();
    files.sort();
    let mut build = cc::Build::new();
    build
        .include(sources)
        .opt_level(3)
        .debug(false)
        .warnings(false)
        .define("LUA_USE_LINUX", None)
        .define("LUA_COMPAT_5_3", None)
        .cargo_metadata(false)
        .files(&files);
    build.try_compile(STOCK_LIBRARY)?;
    let binary = out.join("stock-lua");
    let mut link = build.try_get_compiler()?.to_command();
    link.arg("-I")
        .arg(sources)
        .arg(manifest.join("stock/stock_lua.c"))
        .arg("-o")
        .arg(&binary)
        .arg("-L")
        .arg(out)
        .arg(format!("-l{STOCK_LIBRARY}"))
        .args(["-lm", "-ldl"]);
    let status = link.status()?;
    if !status.success() {
        return Err(format!("linking the stock Lua baseline failed: {status}").into());
    }
    println!("cargo::rustc-env=QUIRL_STOCK_LUA={}", binary.display());
    Ok(())
}

/// The folder of the pinned Lua release inside the registry package, found
/// with `cargo metadata` (the package is this crate's build dependency, so
/// cargo has it). `cargo metadata` resolves the whole workspace, and on a
/// fresh machine a build of one package has downloaded only that package's
/// dependencies (`cargo run -p quirl-lua-cli`), so an offline query can
/// fail for a package this build never uses; the query then runs once more
/// without `--offline`, letting cargo fetch the manifests it lacks.
fn lua_sources(manifest: &Path) -> BuildResult<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let query = |offline: bool| {
        let mut command = std::process::Command::new(&cargo);
        command.args(["metadata", "--format-version", "1"]);
        if offline {
            command.arg("--offline");
        }
        command
            .arg("--manifest-path")
            .arg(manifest.join("Cargo.toml"))
            .output()
    };
    let mut output = query(true)?;
    if !output.status.success() {
        let offline_error = String::from_utf8_lossy(&output.stderr).into_owned();
        output = query(false)?;
        if !output.status.success() {
            return Err(format!(
                "cargo metadata failed offline: {offline_error}\nand online: {}",
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let packages = metadata["packages"]
        .as_array()
        .ok_or("cargo metadata printed no package list")?;
    for package in packages {
        if package["name"] == LUA_SRC_PACKAGE && package["version"] == LUA_SRC_VERSION {
            let manifest_path = package["manifest_path"]
                .as_str()
                .ok_or("cargo metadata printed no manifest path for lua-src")?;
            let folder = Path::new(manifest_path)
                .parent()
                .ok_or("lua-src's manifest has no folder")?
                .join(LUA_RELEASE_DIR);
            if folder.join("lua.h").is_file() {
                return Ok(folder);
            }
            return Err(format!("{} holds no Lua sources", folder.display()).into());
        }
    }
    Err(format!("cargo metadata does not list {LUA_SRC_PACKAGE} {LUA_SRC_VERSION}").into())
}

/// Every source file must be exactly the one the patch was validated
/// against; a new Lua release (or a changed package) must go through the
/// upgrade runbook of README.md first.
fn check_release(manifest: &Path, sources: &Path) -> BuildResult<()> {
    let recorded = std::fs::read_to_string(manifest.join("patches/SOURCES.sha256"))?;
    let mut mismatches = String::new();
    let mut listed = 0usize;
    for line in recorded.lines().filter(|line| !line.trim().is_empty()) {
        let (hash, name) = line
            .split_once("  ")
            .ok_or_else(|| format!("patches/SOURCES.sha256: bad line {line:?}"))?;
        listed += 1;
        let actual = match std::fs::read(sources.join(name)) {
            Ok(bytes) => hex(&Sha256::digest(&bytes)),
            Err(_) => "missing".to_owned(),
        };
        if actual != hash {
            let _ = writeln!(mismatches, "  {name}: recorded {hash}, found {actual}");
        }
    }
    let present = std::fs::read_dir(sources)?
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.ends_with(".c") || name.ends_with(".h")
        })
        .count();
    if present != listed {
        let _ = writeln!(
            mismatches,
            "  {present} source files present, {listed} recorded"
        );
    }
    if mismatches.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the Lua sources in {} are not the release the metering patch was validated against:\n{mismatches}re-validate the patch (reference-worker/metered-lua/README.md, \"Upgrading Lua\") before changing the pin",
            sources.display()
        )
        .into())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut text, byte| {
        let _ = write!(text, "{byte:02x}");
        text
    })
}

/// Apply `patches/NAME.patch` to `work/NAME`, each exactly (no fuzz).
fn apply_patches(patches: &Path, work: &Path) -> BuildResult<()> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(patches)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "patch"))
        .collect();
    names.sort();
    for patch_path in names {
        let target = patch_path
            .file_stem()
            .ok_or("a patch without a name")?
            .to_owned();
        let file = work.join(&target);
        let original = std::fs::read_to_string(&file).map_err(|e| {
            format!(
                "{}: no source {} to patch: {e}",
                patch_path.display(),
                target.to_string_lossy()
            )
        })?;
        let text = std::fs::read_to_string(&patch_path)?;
        let patch = diffy::Patch::from_str(&text)
            .map_err(|e| format!("{}: not a unified diff: {e}", patch_path.display()))?;
        let patched = diffy::apply(&original, &patch).map_err(|e| {
            format!(
                "{} no longer applies to {} ({e}): re-validate the patch (README.md, \"Upgrading Lua\")",
                patch_path.display(),
                target.to_string_lossy()
            )
        })?;
        std::fs::write(&file, patched)?;
    }
    Ok(())
}

/// Compile the library with lua-src's own definitions for Linux builds
/// (`LUA_USE_LINUX`, `LUA_COMPAT_5_3`; API checks in debug builds, as
/// mlua's vendored Lua has them) and link it whole: the objects are then
/// in the link wherever the linker meets them, so GNU ld and lld resolve
/// mlua's references alike.
fn compile(work: &Path) -> BuildResult<()> {
    let mut build = cc::Build::new();
    build
        .include(work)
        .warnings(false)
        .flag_if_supported("-fno-common")
        .cargo_metadata(false);
    let target = std::env::var("TARGET")?;
    if target.contains("linux") || target.contains("bsd") {
        build.define("LUA_USE_LINUX", None);
    } else if target.contains("apple") {
        build.define("LUA_USE_MACOSX", None);
    } else {
        build.define("LUA_USE_POSIX", None);
    }
    build.define("LUA_COMPAT_5_3", None);
    if std::env::var("DEBUG").is_ok_and(|debug| debug == "true") {
        build.define("LUA_USE_APICHECK", None);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(work)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "c"))
        .collect();
    files.sort();
    build.files(&files);
    build.try_compile(LIBRARY)?;
    let out = std::env::var("OUT_DIR")?;
    println!("cargo::rustc-link-search=native={out}");
    println!("cargo::rustc-link-lib=static:+whole-archive={LIBRARY}");
    if target.contains("linux") {
        println!("cargo::rustc-link-lib=m");
    }
    Ok(())
}
