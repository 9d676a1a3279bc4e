//! `load_plugin`: run a plugin chunk, which registers callbacks through the
//! SDK, replacing the previous plugin's registrations (SPEC §7.2
//! PluginRegistrations, §15.9).

use super::{Vm, source_len};
use crate::diag::{Chunk, lua_failure};
use crate::error::OpError;
use quirl_lua_protocol::records::{OperationResult, PluginRegistrations};
use serde_json::Value as Json;

impl Vm {
    fn clear_plugin(&mut self) -> Result<(), OpError> {
        self.state
            .registry()
            .map_err(|e| lua_failure(&e, &[]))?
            .clear();
        Ok(())
    }

    pub(super) fn load_plugin(
        &mut self,
        source: String,
        source_name: String,
    ) -> Result<Json, OpError> {
        source_len(&source, &source_name)?;
        let chunk = Chunk {
            name: source_name,
            text: source,
        };
        self.clear_plugin()?;
        self.plugin = None;
        self.begin(self.policy_wall())?;
        let loaded = self
            .compile_block(&chunk)
            .and_then(|f| f.call::<()>(()))
            .map_err(|e| self.fail(&e, Some(&chunk)));
        if let Err(error) = loaded {
            self.clear_plugin()?;
            return Err(error);
        }
        let registrations = self
            .state
            .registry()
            .map_err(|e| lua_failure(&e, &[]))?
            .registrations
            .clone();
        if registrations == PluginRegistrations::default() {
            return Err(OpError::schema(
                &chunk.name,
                "plugin did not register a command, prompt segment, completion provider, event handler, or contribution",
            ));
        }
        self.plugin = Some(chunk);
        OperationResult::Plugin(registrations)
            .to_value()
            .map_err(|e| OpError::validation(format!("could not encode registrations: {e}")))
    }
}
