//! Reference parent (skeleton).

pub mod process_host;
