//! `load_config`: evaluate a configuration chunk (returned, or passed to
//! `quirl.config{…}`) and read it as Quirl's configuration schema (SPEC §7.2
//! QuirlConfig).

use super::{Vm, source_len};
use crate::config;
use crate::convert::{Shape, to_json};
use crate::diag::{Chunk, lua_failure};
use crate::error::OpError;
use mlua::Value;
use serde_json::Value as Json;

/// Worker-only (Quirl's SDK conversion; DESIGN §15.10): shape bounds for
/// configuration tables (larger than return values: a configuration may
/// carry 32 palettes).
const CONFIG_SHAPE: Shape = Shape {
    nodes: 16_384,
    depth: 16,
    bytes: 1024 * 1024,
    index_max: 4_096,
};

impl Vm {
    pub(super) fn load_config(
        &mut self,
        source: String,
        source_name: String,
    ) -> Result<Json, OpError> {
        source_len(&source, &source_name)?;
        let chunk = Chunk {
            name: source_name,
            text: source,
        };
        self.take_last_config();
        self.begin(self.policy_wall())?;
        let mut value = self.evaluate(&chunk)?;
        if value.is_nil()
            && let Some(key) = self.take_last_config()
        {
            // `quirl.config{…}` called without `return`.
            value = self
                .lua
                .registry_value::<Value>(&key)
                .map_err(|e| lua_failure(&e, &[]))?;
        }
        let json = to_json(&value, &CONFIG_SHAPE, "configuration")?;
        config::to_json(&config::from_lua_json(&json, &chunk.name)?)
    }

    fn take_last_config(&self) -> Option<mlua::RegistryKey> {
        self.state.last_config.lock().ok()?.take()
    }
}
