//! The part of SPEC.md the runner's identity covers (SPEC §19.1): the
//! protocol — every section but §15–18, which describe the reference
//! implementation's sandbox, process host, supervision and lockdown. A
//! change there (a design choice, a measured figure) leaves the digest that
//! `quirl-conformance --version` prints unchanged; a change anywhere else
//! changes it. Shared by the build script (which embeds the digest) and the
//! library's tests.

/// Whether a top-level heading (`## N. …`) starts a reference-design
/// section, which the digest leaves out.
fn is_reference_section(heading: &str) -> bool {
    ["## 15.", "## 16.", "## 17.", "## 18."]
        .iter()
        .any(|prefix| heading.starts_with(prefix))
}

/// SPEC.md without §15–18: each line of every other section, newline-ended.
pub fn protocol_text(spec: &str) -> String {
    let mut text = String::with_capacity(spec.len());
    let mut skipping = false;
    for line in spec.lines() {
        if line.starts_with("## ") {
            skipping = is_reference_section(line);
        }
        if !skipping {
            text.push_str(line);
            text.push('\n');
        }
    }
    text
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

    const SPEC: &str = "# T\nRevision: 1\n## 14. Errata\na\n## 15. Reference worker\nb\n### 15.1 x\nc\n## 18. Lockdown\nd\n## 19. Conformance\ne\n## Appendix A\nf\n";

    #[test]
    fn the_reference_sections_are_left_out_and_everything_else_kept() {
        assert_eq!(
            protocol_text(SPEC),
            "# T\nRevision: 1\n## 14. Errata\na\n## 19. Conformance\ne\n## Appendix A\nf\n"
        );
    }

    #[test]
    fn the_digest_moves_with_the_protocol_text_only() {
        let digest = |spec: &str| fnv1a64(protocol_text(spec).as_bytes());
        let design_edit = SPEC.replace("\nc\n", "\nc, measured again\n");
        assert_eq!(digest(SPEC), digest(&design_edit));
        let protocol_edit = SPEC.replace("\ne\n", "\ne, a new MUST\n");
        assert_ne!(digest(SPEC), digest(&protocol_edit));
    }

    #[test]
    fn spec_md_has_the_reference_sections_this_leaves_out() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../SPEC.md");
        let spec = std::fs::read_to_string(path).unwrap_or_default();
        let headings: Vec<&str> = spec.lines().filter(|l| l.starts_with("## ")).collect();
        for number in ["15.", "16.", "17.", "18.", "19.", "1.", "12."] {
            assert!(
                headings
                    .iter()
                    .any(|h| h.starts_with(&format!("## {number} "))),
                "SPEC.md has no section {number} ({headings:?})"
            );
        }
        let protocol = protocol_text(&spec);
        assert!(protocol.contains("## 19. Conformance"));
        assert!(!protocol.contains("## 15. Reference worker sandbox"));
        assert!(protocol.len() < spec.len() / 2 + spec.len() / 4);
    }
}
