//! The suite's data compiled into the runner (SPEC.md §19): the case files
//! of `conformance/cases/`, the golden fixtures (`fixtures/manifest.json`
//! and `fixtures/frames/`), and the SPEC.md revision they check. `build.rs`
//! scans those directories, so every case file there is embedded.
//!
//! [`Fixtures`] reads the fixtures either from this embedded copy or from
//! a directory given with `--fixtures DIR`.

use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

/// Embedded case files whose name starts with `prefix` (`worker`, `parent`).
pub fn case_files(prefix: &str) -> impl Iterator<Item = (&'static str, &'static str)> {
    CASE_FILES
        .iter()
        .copied()
        .filter(move |(name, _)| name.starts_with(prefix))
}

/// Where the fixtures come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fixtures {
    /// The copy compiled into the runner.
    Embedded,
    /// A directory laid out like `fixtures/` (`manifest.json`, `frames/`).
    Dir(PathBuf),
}

impl Fixtures {
    /// The manifest's text.
    pub fn manifest(&self) -> Result<String, String> {
        match self {
            Fixtures::Embedded => Ok(FIXTURE_MANIFEST.to_owned()),
            Fixtures::Dir(dir) => read_text(&dir.join("manifest.json")),
        }
    }

    /// The bytes of the fixture at `file` (relative to the fixtures root).
    pub fn read(&self, file: &str) -> Result<Vec<u8>, String> {
        match self {
            Fixtures::Embedded => FIXTURE_FILES
                .binary_search_by(|(name, _)| (*name).cmp(file))
                .ok()
                .and_then(|index| FIXTURE_FILES.get(index))
                .map(|(_, bytes)| bytes.to_vec())
                .ok_or_else(|| format!("no embedded fixture {file}")),
            Fixtures::Dir(dir) => {
                let path = dir.join(file);
                std::fs::read(&path)
                    .map_err(|error| format!("cannot read {}: {error}", path.display()))
            }
        }
    }

    /// For messages: `embedded` or the directory.
    pub fn describe(&self) -> String {
        match self {
            Fixtures::Embedded => "embedded".to_owned(),
            Fixtures::Dir(dir) => dir.display().to_string(),
        }
    }
}

fn read_text(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn every_case_file_of_the_directory_is_embedded() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("cases");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".json"))
            .collect();
        on_disk.sort();
        let embedded: Vec<String> = CASE_FILES.iter().map(|(n, _)| (*n).to_owned()).collect();
        assert_eq!(embedded, on_disk);
        for (name, text) in CASE_FILES {
            assert_eq!(
                *text,
                std::fs::read_to_string(dir.join(name)).unwrap(),
                "{name}"
            );
        }
    }

    #[test]
    fn embedded_fixtures_equal_the_repository_fixtures() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
        let on_disk = Fixtures::Dir(dir.clone());
        assert_eq!(
            Fixtures::Embedded.manifest().unwrap(),
            on_disk.manifest().unwrap()
        );
        let count = std::fs::read_dir(dir.join("frames")).unwrap().count();
        assert_eq!(FIXTURE_FILES.len(), count);
        for (name, bytes) in FIXTURE_FILES {
            assert_eq!(*bytes, on_disk.read(name).unwrap().as_slice(), "{name}");
        }
        assert!(
            Fixtures::Embedded
                .read("frames/no_such_fixture.bin")
                .is_err()
        );
    }

    #[test]
    fn the_spec_revision_is_the_marker_of_spec_md() {
        let spec =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../SPEC.md"))
                .unwrap();
        assert!(!SPEC_REVISION.is_empty());
        assert!(
            spec.lines()
                .any(|line| line == format!("Revision: {SPEC_REVISION}")),
            "SPEC.md has no line `Revision: {SPEC_REVISION}`"
        );
        assert_eq!(SPEC_DIGEST.len(), 16);
    }
}
