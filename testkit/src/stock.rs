//! Stock Lua as the oracle (feature `stock`): the unpatched release the
//! worker's VM is built from, compiled by `quirl-lua-metered-vm`'s
//! `stock-baseline` feature from the same verified sources with the same
//! flags (`-O3 -DLUA_USE_LINUX -DLUA_COMPAT_5_3`), run as its own process.
//! The differential tests compare the sandbox against it (DESIGN §15), and
//! the benchmarks time it next to the worker (BENCHMARKS.md).

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The stock interpreter: `STOCK_LUA FILE [CHUNKNAME]` runs FILE as a
/// chunk and prints what it returns, tab-separated.
pub fn path() -> &'static Path {
    Path::new(quirl_lua_metered_vm::STOCK_LUA)
}

/// A source file for the stock interpreter, removed when dropped.
pub struct SourceFile {
    path: std::path::PathBuf,
}

impl SourceFile {
    /// Write `source` to a fresh file under the temporary directory.
    pub fn new(source: &str) -> std::io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "quirl-stock-{}-{}.lua",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let mut file = std::fs::File::create_new(&path)?;
        file.write_all(source.as_bytes())?;
        Ok(Self { path })
    }

    /// Where the source is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SourceFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Run `source` in a fresh stock Lua state as a chunk named `chunk_name`
/// (e.g. `=eval`, the worker's chunk name) and return what it returned,
/// as stock Lua's `tostring` shows each value, tab-separated; or the
/// error message of a load or run error (its error object as a string).
///
/// # Panics
/// When the stock interpreter cannot be started or its output is not
/// text (a broken test setup, not a result).
pub fn run(source: &str, chunk_name: &str) -> Result<String, String> {
    let file = SourceFile::new(source)
        .unwrap_or_else(|e| panic!("cannot write a source for stock Lua: {e}"));
    let output = Command::new(path())
        .arg(file.path())
        .arg(chunk_name)
        .output()
        .unwrap_or_else(|e| panic!("cannot run stock Lua at {}: {e}", path().display()));
    let stdout = String::from_utf8(output.stdout)
        .unwrap_or_else(|e| panic!("stock Lua printed no text: {e}"));
    if output.status.success() {
        return Ok(stdout.strip_suffix('\n').unwrap_or(&stdout).to_owned());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let message = stderr.strip_prefix("stock-lua: ").unwrap_or(&stderr);
    Err(message.strip_suffix('\n').unwrap_or(message).to_owned())
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn stock_lua_returns_values_and_errors_as_lua_shows_them() {
        assert_eq!(
            run("return 1, 'a', nil, 2.5", "=eval"),
            Ok("1\ta\tnil\t2.5".to_owned())
        );
        assert_eq!(run("return", "=eval"), Ok(String::new()));
        assert_eq!(
            run("local x = nil; return x.y", "=eval"),
            Err("eval:1: attempt to index a nil value (local 'x')".to_owned())
        );
        assert_eq!(
            run("return +", "=eval"),
            Err("eval:1: unexpected symbol near '+'".to_owned())
        );
        assert_eq!(run("return _VERSION", "=eval"), Ok("Lua 5.4".to_owned()));
    }

    #[test]
    fn stock_lua_holds_none_of_the_meter() {
        let binary = std::fs::read(path()).expect("the stock binary is readable");
        let holds = |needle: &[u8]| binary.windows(needle.len()).any(|w| w == needle);
        // The pinned release's banner is there, the meter's symbols are not.
        assert!(holds(b"Lua 5.4.9"));
        assert!(!holds(b"lua_meter_begin"));
        assert!(!holds(b"luaQ_"));
    }
}
