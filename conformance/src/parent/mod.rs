//! The parent suite (placeholder).
use crate::exec::Case;
use crate::report::Verdict;
use std::ffi::OsString;
use std::path::PathBuf;
/// A parent case.
pub struct ParentCase;
impl Case for ParentCase {
    fn name(&self) -> &str { "" }
    fn spec(&self) -> &str { "" }
    fn tags(&self) -> &[String] { &[] }
    fn run(&self) -> Verdict { Verdict::Pass }
}
/// Build the suite.
pub fn suite(_command: Vec<OsString>, _exe: PathBuf) -> Result<Vec<ParentCase>, String> { Ok(vec![]) }
