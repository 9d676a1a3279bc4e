//! Conformance (skeleton).
