//! `event`: deliver an extension event to every handler subscribed to its
//! kind, in name order, each under its own deadline, and collect their
//! reports (SPEC §6.16, §7.2 EventHandlerReport).

use super::Vm;
use crate::convert::{RETURN_SHAPE, to_json};
use crate::diag::lua_failure;
use crate::error::OpError;
use crate::events::{self, Event};
use quirl_lua_protocol::records::ExtensionEvent;
use serde_json::Value as Json;

impl Vm {
    pub(super) fn event(&mut self, record: &ExtensionEvent) -> Result<Json, OpError> {
        let (event, mut handlers) = {
            let mut registry = self.state.registry().map_err(|e| lua_failure(&e, &[]))?;
            let event = Event::new(record, registry.last_event_sequence)?;
            registry.last_event_sequence = Some(event.sequence);
            let handlers = registry
                .events
                .iter()
                .filter(|(_, handler)| handler.events.contains(&event.kind))
                .map(|(name, handler)| {
                    Ok((
                        name.clone(),
                        self.callback(&handler.callback.function)?,
                        handler.capabilities.clone(),
                        handler.callback.deadline,
                    ))
                })
                .collect::<Result<Vec<_>, OpError>>()?;
            (event, handlers)
        };
        handlers.sort_by(|a, b| a.0.cmp(&b.0));
        let mut reports = Vec::with_capacity(handlers.len());
        for (name, function, capabilities, deadline) in handlers {
            let outcome = self
                .context(&event.view(&capabilities))
                .and_then(|view| {
                    self.begin(deadline)?;
                    self.call(&function, view)
                })
                .and_then(|value| to_json(&value, &RETURN_SHAPE, "event handler result"))
                .and_then(|value| events::actions(&value, &name, &capabilities));
            if self.meter.settle().is_some() {
                break;
            }
            reports.push(events::report(&name, outcome));
        }
        Ok(Json::Array(reports))
    }
}
