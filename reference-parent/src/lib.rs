//! Reference parent (skeleton).
