//! Callback deadlines on the request path (DESIGN §17.6).
//!
//! A plugin declares a deadline for each of its callbacks when it loads:
//! prompt segments (`deadline_ms`, at most 100), event handlers and
//! contributions (`deadline_ms`, at most 250); completion providers always
//! have 50 ms and `plugin_command` carries its own `deadline_ms`. The worker
//! holds each callback to its deadline with its own clock; the parent holds
//! it to the same deadline plus [`CALLBACK_SLACK`], so a callback the worker
//! cannot stop (a native call no hook interrupts) is killed shortly after
//! its own deadline instead of at the request's `wall_time_ms`. The kill is
//! an ordinary deadline failure: the worker is killed, reaped and poisoned,
//! and the lifecycle layer restarts it as for any deadline (DESIGN §17.7).
//!
//! [`CallbackDeadlines`] remembers the declarations of the plugin a worker
//! loaded and turns a callback request into its absolute deadline.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use quirl_lua_protocol::records::{ContributionKind, ExtensionEvent, PluginRegistrations};

/// Time the parent adds to a callback's declared deadline before it kills
/// the worker. The worker stops a callback at the deadline with its own
/// clock, so the slack only has to cover what the parent's clock sees and
/// the worker's does not: the request and the answer crossing the pipes and
/// the worker waiting to be scheduled on a loaded machine (with 50 ms, a
/// trivial 100 ms segment was killed on a 2-core machine at load 12). It
/// delays only the kill of a worker that is stuck.
pub const CALLBACK_SLACK: Duration = Duration::from_millis(250);

/// Deadline of completion providers (Quirl's fixed 50 ms, DESIGN §15.6; the
/// protocol crate's one definition, re-exported).
pub use quirl_lua_protocol::limits::COMPLETION_DEADLINE;

/// The declared deadlines of the plugin a worker loaded.
#[derive(Debug, Clone, Default)]
pub struct CallbackDeadlines {
    prompts: BTreeMap<String, Duration>,
    contributions: BTreeMap<(String, String), Duration>,
    events: Vec<(Vec<String>, Duration)>,
}

impl CallbackDeadlines {
    /// The deadlines declared by `registrations`.
    pub fn new(registrations: &PluginRegistrations) -> Self {
        Self {
            prompts: registrations
                .prompt_segments
                .iter()
                .map(|p| (p.name.clone(), Duration::from_millis(p.deadline_ms)))
                .collect(),
            contributions: registrations
                .contributions
                .iter()
                .map(|c| {
                    (
                        (serialized_name(&c.kind).unwrap_or_default(), c.name.clone()),
                        Duration::from_millis(c.deadline_ms),
                    )
                })
                .collect(),
            events: registrations
                .events
                .iter()
                .map(|e| {
                    let kinds = e.events.iter().filter_map(serialized_name).collect();
                    (kinds, Duration::from_millis(e.deadline_ms))
                })
                .collect(),
        }
    }

    /// Declared deadline of the prompt segment `name` (`None`: not
    /// registered; the worker reports that as a guest error).
    pub fn prompt(&self, name: &str) -> Option<Duration> {
        self.prompts.get(name).copied()
    }

    /// Declared deadline of a contribution.
    pub fn contribution(&self, kind: ContributionKind, name: &str) -> Option<Duration> {
        self.contributions
            .get(&(serialized_name(&kind).unwrap_or_default(), name.to_owned()))
            .copied()
    }

    /// Time the handlers of `event` may take together: the worker runs every
    /// subscribed handler in turn, each under its own deadline.
    pub fn event(&self, event: &ExtensionEvent) -> Option<Duration> {
        let kind = event_kind(event)?;
        let total = self
            .events
            .iter()
            .filter(|(kinds, _)| kinds.contains(&kind))
            .map(|(_, deadline)| *deadline)
            .fold(Duration::ZERO, |sum, d| sum.saturating_add(d));
        Some(total)
    }
}

/// The absolute deadline of a callback that started at `started` with the
/// declared `callback` deadline, never later than `request` (the request's
/// own deadline: the policy's wall time).
pub fn callback_deadline(started: Instant, callback: Duration, request: Instant) -> Instant {
    started
        .checked_add(callback.saturating_add(CALLBACK_SLACK))
        .map_or(request, |deadline| deadline.min(request))
}

/// The wire name of a unit enum value (`"session_start"`, `"panel"`).
fn serialized_name(value: &impl serde::Serialize) -> Option<String> {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
}

/// The `kind` of an event's payload, as on the wire.
fn event_kind(event: &ExtensionEvent) -> Option<String> {
    serialized_name(&serde_json::to_value(event).ok()?.get("data")?.get("kind")?)
}
