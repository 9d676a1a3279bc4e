//! Worker cases as data, and the interpreter that plays the parent.
//!
//! A case file (`conformance/cases/*.json`) is an object with an `about`
//! text, optional `defaults` and a list of `cases`. A case is either a
//! *shorthand* — a policy, some `setup` operations, one operation (or
//! just `source` for an `eval`), optional host-call exchanges and an
//! `expect` — or a list of explicit `steps`. The format is documented in
//! `conformance/README.md`; this module is its reference interpreter.
//!
//! - `model`: the case file format and the expansion of the shorthand;
//! - `substitute`: placeholders (`${DESCRIPTOR}`, `${REPEAT:N:TEXT}`) and
//!   hex in case texts;
//! - `interpret`: the interpreter — spawning the worker and performing the
//!   send steps;
//! - `judge`: the expect steps and the checks after the last step, which
//!   hold the worker's frames and exit to the SPEC.

mod interpret;
mod judge;
mod model;
mod substitute;

pub use interpret::Interpreter;
pub use judge::{check_answer, describe_frame, subset};
pub use model::{
    CaseData, CaseFile, Defaults, ExitStep, Expect, HostCallExpect, HostExchange, InFlightStep,
    InitStep, OneOrMany, Padded, PolicyData, RequestStep, Slowly, Step, ViolationStep,
};
pub use substitute::{DESCRIPTOR_PLACEHOLDER, expand, expand_repeats, hex, substitute};
