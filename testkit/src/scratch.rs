//! Scratch directories and bounded waits of the supervision tests (the
//! supervisor's lifecycle tests and the CLI's), and the plugin they load.

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
    /// A new, empty directory under the temporary directory, named after
    /// `test`, this process and a counter.
    pub fn new(test: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "quirl-lua-lifecycle-{}-{test}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        if let Err(error) = std::fs::create_dir_all(&dir) {
            panic!("cannot create {}: {error}", dir.display());
        }
        Self { dir }
    }

    /// Write `text` to `name` (atomically: write then rename).
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.join(name);
        let temporary = self.dir.join(format!(".{name}.new"));
        if let Err(error) =
            std::fs::write(&temporary, text).and_then(|()| std::fs::rename(&temporary, &path))
        {
            panic!("cannot write {}: {error}", path.display());
        }
        path
    }

    /// The directory.
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
