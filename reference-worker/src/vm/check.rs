//! `check` (SPEC §7.1, §7.2, DESIGN §15.10): compile the source without
//! running it, then lint it against this VM's own environment
//! (`crate::lint`).
//!
//! A source Lua does not compile is a `lua` error, as before. What the lint
//! finds goes where the parent can take it: with the worker capability
//! `check.diagnostics` granted, as the check report (every finding, errors
//! and warnings); without it, Quirl 0.1's wire: the errors as one
//! `validation` error response, and `null` when there are none (warnings
//! are not sent).

use super::{Vm, normalize_shebang, source_len};
use crate::diag::Chunk;
use crate::error::OpError;
use crate::lint::environment::{LIVE_ENTRIES_MAX, Tree};
use crate::lint::{self, Environment};
use quirl_lua_protocol::records::{CHECK_DIAGNOSTICS_GRANT, OperationResult};
use serde_json::Value as Json;

impl Vm {
    pub(super) fn check(&mut self, source: &str, source_name: String) -> Result<Json, OpError> {
        source_len(source, &source_name)?;
        let chunk = Chunk {
            name: source_name,
            text: normalize_shebang(source),
        };
        self.begin(self.policy_wall())?;
        self.compile_block(&chunk)
            .map_err(|e| self.fail(&e, Some(&chunk)))?;
        let findings = match self.lint_environment() {
            Ok(environment) => {
                let (findings, tree) = lint::lint_deferring(&chunk.text, &environment);
                self.deferred = Some(tree);
                findings
            }
            Err(why) => vec![lint::not_linted(why)],
        };
        if self
            .state
            .capabilities
            .grants
            .contains(CHECK_DIAGNOSTICS_GRANT)
        {
            return OperationResult::CheckReport(lint::check_report(&findings))
                .to_value()
                .map_err(|error| {
                    OpError::validation("the check report cannot be represented")
                        .with_context(error.to_string())
                });
        }
        match lint::check_error(&findings, &chunk) {
            Some(error) => Err(error),
            None => Ok(Json::Null),
        }
    }

    /// The environment the lint judges against: what a sandbox with this
    /// VM's grants holds, plus what this VM holds now (globals and members
    /// earlier requests defined). Read raw: no guest code runs.
    fn lint_environment(&self) -> Result<Environment, String> {
        let environment = Environment::for_grants(&self.state.capabilities.grants)?;
        Ok(match Tree::read(&self.lua, LIVE_ENTRIES_MAX) {
            Ok(reading) => environment.with_live(reading),
            Err(_) => Environment {
                names_complete: false,
                ..environment
            },
        })
    }
}
