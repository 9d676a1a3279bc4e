//! Fake worker (placeholder).
use std::path::Path;
use std::process::ExitCode;
/// Entry point.
pub fn main(_case: &str, _pid_file: &Path) -> ExitCode { ExitCode::FAILURE }
