//! Helpers of the CLI's lifecycle tests: plugin files in a scratch
//! directory and a bounded wait. The supervisor's lifecycle tests have
//! their own (reference-parent/tests/support/lifecycle.rs, with the pool
//! and /proc checks); a `#[path]` include may not climb into another
//! package, and these few lines are all the CLI tests need.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A plugin whose prompt segment `version` renders `version`.
pub fn plugin_source(version: &str) -> String {
    format!(
        "local version = \"{version}\"\nquirl.prompt.add_segment({{ name = \"version\", deadline_ms = 100, render = function() return version end }})\n"
    )
}

/// A scratch directory removed on drop.
pub struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    pub fn new(test: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "quirl-lua-cli-lifecycle-{}-{test}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }

    /// Write `text` to `name` (atomically: write then rename).
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.join(name);
        let temporary = self.dir.join(format!(".{name}.new"));
        std::fs::write(&temporary, text).unwrap();
        std::fs::rename(&temporary, &path).unwrap();
        path
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Poll `condition` every 2 ms until it holds or `patience` passes.
pub fn eventually(patience: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + patience;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
