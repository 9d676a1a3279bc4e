//! Reference worker (skeleton).
