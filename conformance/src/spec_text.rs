//! The text the runner's identity covers (SPEC §19.1): SPEC.md whole, the
//! protocol document. The reference implementation's design is DESIGN.md
//! and measured figures are BENCHMARKS.md; neither is an input here, so
//! editing them leaves the digest that `quirl-conformance --version` prints
//! unchanged, while any change to SPEC.md changes it. Shared by the build
//! script (which embeds the digest) and the library's tests.

/// The digest `--version` names: FNV-1a 64 of the whole of SPEC.md.
pub fn protocol_digest(spec: &str) -> u64 {
    fnv1a64(spec.as_bytes())
}

/// FNV-1a 64 of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn document(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// `## N.` and `### N.M` headings of a document, by number.
    fn section_numbers(text: &str) -> Vec<String> {
        text.lines()
            .filter_map(|line| {
                let rest = line
                    .strip_prefix("### ")
                    .or_else(|| line.strip_prefix("## "))?;
                let number = rest.split_whitespace().next()?.trim_end_matches('.');
                number
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '.')
                    .then(|| number.to_owned())
            })
            .collect()
    }

    #[test]
    fn fnv1a64_matches_the_published_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_embedded_digest_is_spec_md_alone_so_a_design_edit_keeps_it() {
        // The build script embeds the digest of SPEC.md as it is; DESIGN.md
        // and BENCHMARKS.md are no input, so editing them cannot move it.
        assert_eq!(
            crate::embedded::SPEC_DIGEST,
            format!("{:016x}", protocol_digest(&document("SPEC.md")))
        );
        let build_script = document("conformance/build.rs");
        assert!(!build_script.contains("DESIGN.md\")"));
        assert!(!build_script.contains("BENCHMARKS.md\")"));
    }

    #[test]
    fn a_protocol_edit_anywhere_in_spec_md_changes_the_digest() {
        let spec = document("SPEC.md");
        let digest = protocol_digest(&spec);
        // Every byte counts: the requirements on every peer in §15–18 and
        // the pointers to the design included.
        for (from, to) in [
            (
                "### 15.1 Requirements on every worker",
                "### 15.1 Requirements",
            ),
            (
                "§15.2–§15.12: see DESIGN.md.",
                "§15.2–§15.12: see DESIGN.md",
            ),
            ("## 19. Conformance", "## 19. Conformance "),
            ("## Appendix A. Constants", "## Appendix A. Constant"),
        ] {
            let protocol_edit = spec.replacen(from, to, 1);
            assert_ne!(spec, protocol_edit, "SPEC.md has no `{from}`");
            assert_ne!(digest, protocol_digest(&protocol_edit), "{from}");
        }
    }

    #[test]
    fn spec_md_keeps_the_protocol_and_design_md_the_reference_design() {
        let spec = section_numbers(&document("SPEC.md"));
        let design = section_numbers(&document("DESIGN.md"));
        for number in [
            "1", "4.3", "14", "15", "15.1", "16.1", "17.1", "18", "19", "19.1",
        ] {
            assert!(spec.iter().any(|n| n == number), "SPEC.md has no §{number}");
        }
        for number in [
            "15.2", "15.6", "15.12", "16.2", "16.8", "17.2", "17.7", "18.1", "18.6",
        ] {
            assert!(
                design.iter().any(|n| n == number),
                "DESIGN.md has no §{number}"
            );
            assert!(
                !spec.iter().any(|n| n == number),
                "SPEC.md still has §{number}"
            );
        }
        // A subsection stands in one document only, so citations stay unique.
        for number in design.iter().filter(|n| n.contains('.')) {
            assert!(!spec.contains(number), "§{number} is in both documents");
        }
        assert!(design.iter().all(|n| {
            n.split('.')
                .next()
                .is_some_and(|top| ["15", "16", "17", "18"].contains(&top))
        }));
    }
}
