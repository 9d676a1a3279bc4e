//! Budgets and sticky termination.
//!
//! One [`Meter`] per VM holds the per-request budgets (instructions, wall
//! deadline, cancellation) and the VM-wide memory limit, and records the first
//! reason the VM had to stop. That record is *sticky*: once set it is never
//! cleared, every protected-call wrapper, the instruction hook, the allocator
//! and every host function consult it and re-raise, and the operation's
//! verdict is taken from it rather than from whatever the guest managed to
//! return. A VM that has stopped is never used again (the worker answers and
//! exits).
//!
//! # What "instructions" means
//!
//! The budget is charged in *units*, and a request stops at the first check
//! after the charged units exceed `instruction_limit`:
//! - the count hook charges one interval (`min(1000, instruction_limit)`
//!   VM instructions) each time it fires, in any thread;
//! - a coroutine is charged, whenever control returns from it, the
//!   instructions it ran since its own hook counter last fired (`hook.rs`,
//!   `settle_thread`), so a coroutine that dies between two firings is
//!   still charged what it ran;
//! - native library functions whose running time grows with their arguments
//!   are charged before they run: one unit per element they visit
//!   (`table.move`, `table.concat`, `table.insert`/`remove` with a position,
//!   `table.unpack`, `table.sort` at n·log2 n, `string.byte`,
//!   `utf8.codepoint`) and one unit per 64 bytes they scan without
//!   allocating (`utf8.len`, `utf8.offset`, the strings of `string.format`'s
//!   `%s` with a width or precision, a literal `string.find` window by
//!   window); what `sub`, `upper`, `lower`, `reverse` and `format` copy is
//!   charged by the allocator gate (next item);
//! - every byte the VM allocates during a request (gross, frees are not
//!   credited) is charged at one unit per 64 bytes by the allocator gate:
//!   native work that builds its result as it goes (concatenation, table
//!   resizes, `string.format`, buffers) is proportional to what it allocates,
//!   even when the memory is freed again at once;
//! - native scans that allocate nothing are charged by the wrappers in
//!   `sandbox.lua` (`next`/`pairs`, `string.pack` formats, `utf8.codes`) and
//!   by the link-time wrappers in `vm_costs.rs` (long-string comparison and
//!   equality, string-to-number conversion, stack walks, table rehashes).
//!
//! SPEC §15.6 lists every reachable function with its cost model.
//!
//! The charged units are never fewer than the VM instructions executed minus
//! one interval, so a request runs at most `instruction_limit` plus one
//! interval of VM instructions.
//!
//! # After a stop
//!
//! A trip recorded where no error can be raised (the allocator, the
//! link-time wrappers) takes effect at the next check: the next allocation
//! that grows the heap by more than [`STOPPED_GROWTH_MAX`] bytes is refused,
//! and the count hook raises at its next firing and from then on before every
//! instruction of that thread (see `hook.rs`).

use crate::error::OpError;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Largest hook interval, in VM instructions.
pub const HOOK_INTERVAL_MAX: u64 = 1000;
/// Bytes of native copying charged as one instruction unit.
pub const BYTES_PER_UNIT: u64 = 64;
/// Largest heap growth the allocator still grants once the VM has stopped
/// (the unwinding and the error record need a little memory; nothing may
/// build large values any more).
pub const STOPPED_GROWTH_MAX: u64 = 4096;

/// Why a VM stopped. Set once, never cleared.
#[derive(Debug, Clone)]
pub enum Stop {
    /// A budget tripped; the worker answers with a `resource_limit` error
    /// and retires the VM.
    Limit(LimitTrip),
    /// The parent broke the protocol during a host call; the worker exits
    /// without answering.
    Violation(String),
}

/// Which budget tripped and what was observed.
#[derive(Debug, Clone)]
pub enum LimitTrip {
    /// Charged instruction units exceeded the limit.
    Instructions {
        /// Units charged when the check failed.
        charged: u64,
        /// The request's limit.
        limit: u64,
    },
    /// The wall-clock deadline passed.
    WallTime {
        /// Milliseconds since the request's budget was reset.
        elapsed_ms: u64,
        /// The request's deadline in milliseconds.
        limit_ms: u64,
    },
    /// The allocator refused memory because of the VM's limit.
    Memory {
        /// Bytes the refused allocation asked for.
        requested: u64,
        /// Bytes the VM held when it was refused.
        used: u64,
        /// The VM's memory limit.
        limit: u64,
    },
    /// The cancellation flag was set.
    Cancelled,
    /// `quirl.process.run` was called more often than the per-request host
    /// call budget allows (the call over budget never reaches the wire).
    HostCalls {
        /// The number of the refused call.
        observed: u32,
        /// Host calls allowed per request.
        limit: u32,
    },
    /// The parent answered a host call with a `resource_limit` error.
    Host(OpError),
}

impl LimitTrip {
    /// The `resource_limit` error record reported for this trip.
    pub fn to_error(&self) -> OpError {
        match self {
            Self::Instructions { charged, limit } => {
                OpError::resource_limit("Lua exceeded its configured instruction budget")
                    .with_context("limit: instructions")
                    .with_context(format!("observed: {charged} instructions; limit: {limit}"))
                    .with_help("Reduce Lua work or raise instruction_limit after review")
            }
            Self::WallTime {
                elapsed_ms,
                limit_ms,
            } => OpError::resource_limit("Lua exceeded its configured wall_time budget")
                .with_context("limit: wall_time")
                .with_context(format!("observed: {elapsed_ms} ms; limit: {limit_ms} ms"))
                .with_help("Reduce callback work or raise wall_time after review"),
            Self::Memory {
                requested,
                used,
                limit,
            } => OpError::resource_limit("Lua exceeded its configured memory budget")
                .with_context("limit: memory")
                .with_context(format!(
                    "observed: {used} bytes in use, {requested} more requested; limit: {limit} bytes"
                ))
                .with_help("Reduce retained Lua data or raise memory_limit_bytes after review"),
            Self::Cancelled => OpError::resource_limit("Lua execution was cancelled")
                .with_context("limit: cancellation")
                .with_context("observed: cancellation flag set")
                .with_help("Retry only after clearing the owning cancellation handle"),
            Self::HostCalls { observed, limit } => OpError::resource_limit(
                "quirl.process.run exceeded its per-request host call budget",
            )
            .with_context("limit: host_calls")
            .with_context(format!("observed: {observed} host calls; limit: {limit}"))
            .with_help("Run fewer processes per request"),
            Self::Host(error) => error.clone(),
        }
    }
}

/// The error value raised into Lua when a VM has stopped. Guest code never
/// sees anything it could use: protected calls re-raise it, and the worker's
/// verdict comes from the [`Meter`], not from this value.
#[derive(Debug, Clone, Copy)]
pub struct StopSignal;

impl fmt::Display for StopSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the sandbox stopped this request")
    }
}

impl std::error::Error for StopSignal {}

/// Convert a stop into the error raised inside Lua.
pub fn stop_error() -> mlua::Error {
    mlua::Error::external(StopSignal)
}

/// Per-VM budget state shared by the hook, the allocator gate, host
/// functions and the operation driver.
#[derive(Debug)]
pub struct Meter {
    epoch: Instant,
    interval: u64,
    memory_limit: u64,
    instruction_limit: AtomicU64,
    charged: AtomicU64,
    allocated_bytes: AtomicU64,
    metamethod_lookups: AtomicU64,
    started_ns: AtomicU64,
    deadline_ns: AtomicU64,
    wall_ms: AtomicU64,
    cancel: Arc<AtomicBool>,
    stop: OnceLock<Stop>,
    memory: MemoryTrack,
}

/// What the allocator gate reports: bytes in use and an allocation refused
/// by the limit that has not (yet) been recovered by Lua's emergency
/// collection.
#[derive(Debug, Default)]
struct MemoryTrack {
    used: AtomicI64,
    pending: AtomicBool,
    pending_ptr: AtomicUsize,
    pending_osize: AtomicUsize,
    pending_nsize: AtomicUsize,
    since_clock_check: AtomicU64,
}

/// Metamethod lookups charged as one unit (see
/// [`Meter::charge_metamethod_lookup`]).
pub const LOOKUPS_PER_UNIT: u64 = 8;

/// Bytes of allocation growth between two clock checks in the allocator.
pub const ALLOC_CLOCK_CHECK_BYTES: u64 = 256 * 1024;

const NO_DEADLINE: u64 = u64::MAX;

impl Meter {
    /// A meter for a VM with the given memory limit and instruction limit
    /// (the latter fixes the hook interval).
    pub fn new(memory_limit: u64, instruction_limit: u64, cancel: Arc<AtomicBool>) -> Self {
        Self {
            epoch: Instant::now(),
            interval: instruction_limit.clamp(1, HOOK_INTERVAL_MAX),
            memory_limit,
            instruction_limit: AtomicU64::new(instruction_limit),
            charged: AtomicU64::new(0),
            allocated_bytes: AtomicU64::new(0),
            metamethod_lookups: AtomicU64::new(0),
            started_ns: AtomicU64::new(0),
            deadline_ns: AtomicU64::new(NO_DEADLINE),
            wall_ms: AtomicU64::new(0),
            cancel,
            stop: OnceLock::new(),
            memory: MemoryTrack::default(),
        }
    }

    /// Hook interval in VM instructions.
    pub fn interval(&self) -> u64 {
        self.interval
    }

    /// The VM's memory limit in bytes.
    pub fn memory_limit(&self) -> u64 {
        self.memory_limit
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX - 1)
    }

    /// Reset the budgets for a new request (or test function, or callback):
    /// nothing charged, a deadline `wall` from now. The stop record is not
    /// touched: a stopped VM stays stopped.
    pub fn begin(&self, instruction_limit: u64, wall: Duration) {
        let now = self.now_ns();
        let wall_ns = u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX);
        self.instruction_limit
            .store(instruction_limit, Ordering::Relaxed);
        self.charged.store(0, Ordering::Relaxed);
        self.allocated_bytes.store(0, Ordering::Relaxed);
        self.metamethod_lookups.store(0, Ordering::Relaxed);
        self.started_ns.store(now, Ordering::Relaxed);
        self.wall_ms.store(
            u64::try_from(wall.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.deadline_ns.store(
            now.saturating_add(wall_ns).min(NO_DEADLINE - 1),
            Ordering::Relaxed,
        );
    }

    /// Leave request mode: no deadline applies until the next `begin`.
    pub fn end(&self) {
        self.deadline_ns.store(NO_DEADLINE, Ordering::Relaxed);
    }

    /// Time left before the current deadline (zero when none is active).
    pub fn remaining(&self) -> Duration {
        let deadline = self.deadline_ns.load(Ordering::Relaxed);
        if deadline == NO_DEADLINE {
            return Duration::ZERO;
        }
        Duration::from_nanos(deadline.saturating_sub(self.now_ns()))
    }

    /// The sticky stop record, if any.
    pub fn stopped(&self) -> Option<&Stop> {
        self.stop.get()
    }

    /// Record a stop (the first one wins) and return the error to raise.
    pub fn trip(&self, stop: Stop) -> mlua::Error {
        let _ = self.stop.set(stop);
        stop_error()
    }

    /// Record a limit trip.
    pub fn trip_limit(&self, trip: LimitTrip) -> mlua::Error {
        self.trip(Stop::Limit(trip))
    }

    /// [`Meter::guard`] for a C function: `true` when the request must
    /// stop (a pending memory refusal is recorded as the trip first).
    pub fn must_stop(&self) -> bool {
        if self.stop.get().is_some() {
            return true;
        }
        if self.memory.pending.load(Ordering::Relaxed) {
            let _recorded = self.trip_limit(self.pending_memory_trip());
            return true;
        }
        false
    }

    /// Fail if the VM has stopped, or if the allocator refused memory that
    /// Lua did not get back by collecting garbage (which makes it a memory
    /// trip now).
    pub fn guard(&self) -> mlua::Result<()> {
        if self.stop.get().is_some() {
            return Err(stop_error());
        }
        if self.memory.pending.load(Ordering::Relaxed) {
            return Err(self.trip_limit(self.pending_memory_trip()));
        }
        Ok(())
    }

    /// Record a memory trip if a refusal is pending, then report whether the
    /// VM is stopped. Used where an error cannot be raised.
    pub fn settle(&self) -> Option<&Stop> {
        if self.stop.get().is_none() && self.memory.pending.load(Ordering::Relaxed) {
            let _ = self.stop.set(Stop::Limit(self.pending_memory_trip()));
        }
        self.stop.get()
    }

    fn pending_memory_trip(&self) -> LimitTrip {
        LimitTrip::Memory {
            requested: self.memory.pending_nsize.load(Ordering::Relaxed) as u64,
            used: self.used_memory(),
            limit: self.memory_limit,
        }
    }

    /// Bytes the VM holds, as counted by the allocator gate.
    pub fn used_memory(&self) -> u64 {
        u64::try_from(self.memory.used.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// Bytes the VM may still allocate.
    pub fn memory_headroom(&self) -> u64 {
        self.memory_limit.saturating_sub(self.used_memory())
    }

    /// Seed the usage counter when the gate is installed.
    pub fn set_used_memory(&self, used: u64) {
        self.memory
            .used
            .store(i64::try_from(used).unwrap_or(i64::MAX), Ordering::Relaxed);
    }

    /// Allocator gate: an allocation is about to grow the heap by `growth`
    /// bytes. Returns `false` when it must be refused because the clock
    /// demands a stop (checked every [`ALLOC_CLOCK_CHECK_BYTES`]).
    pub fn before_growth(&self, growth: u64) -> bool {
        if self.stop.get().is_some() {
            return growth <= STOPPED_GROWTH_MAX;
        }
        if self.charge_quietly_allocation(growth) {
            return false;
        }
        let since = self
            .memory
            .since_clock_check
            .fetch_add(growth, Ordering::Relaxed)
            .saturating_add(growth);
        if since < ALLOC_CLOCK_CHECK_BYTES {
            return true;
        }
        self.memory.since_clock_check.store(0, Ordering::Relaxed);
        if self.stop.get().is_some() {
            return true;
        }
        match self.clock_trip() {
            Some(trip) => {
                let _ = self.stop.set(Stop::Limit(trip));
                false
            }
            None => true,
        }
    }

    /// Charge `growth` allocated bytes (one unit per [`BYTES_PER_UNIT`],
    /// fractions carried over) while a request runs. Returns `true` when this
    /// charge tripped the instruction budget (the trip is recorded; the
    /// caller refuses the allocation).
    fn charge_quietly_allocation(&self, growth: u64) -> bool {
        if self.deadline_ns.load(Ordering::Relaxed) == NO_DEADLINE {
            return false;
        }
        let before = self.allocated_bytes.fetch_add(growth, Ordering::Relaxed);
        let units = before.saturating_add(growth) / BYTES_PER_UNIT - before / BYTES_PER_UNIT;
        self.charge_quietly(units)
    }

    /// One metamethod looked up in a metatable (a step of an `__index` or
    /// `__newindex` chain, which Lua follows up to 2,000 tables inside one
    /// instruction): one unit per [`LOOKUPS_PER_UNIT`] lookups of a request.
    /// Returns `true` when the VM is stopped afterwards.
    pub fn charge_metamethod_lookup(&self) -> bool {
        let lookups = self
            .metamethod_lookups
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        lookups.is_multiple_of(LOOKUPS_PER_UNIT) && self.charge_quietly(1)
    }

    /// Charge `units` from a context that cannot raise a Lua error (the
    /// allocator, the link-time wrappers of `vm_costs.rs`). Returns `true`
    /// when the VM is stopped afterwards; the trip, if any, is recorded and
    /// raised at the next check.
    pub fn charge_quietly(&self, units: u64) -> bool {
        if self.stop.get().is_some() {
            return true;
        }
        if units == 0 {
            return false;
        }
        let charged = self
            .charged
            .fetch_add(units, Ordering::Relaxed)
            .saturating_add(units);
        let limit = self.instruction_limit.load(Ordering::Relaxed);
        if charged > limit && self.deadline_ns.load(Ordering::Relaxed) != NO_DEADLINE {
            let _ = self
                .stop
                .set(Stop::Limit(LimitTrip::Instructions { charged, limit }));
            return true;
        }
        false
    }

    /// Allocator gate: the limit refused `(ptr, osize, nsize)`. Lua retries
    /// a refused allocation once, with the same arguments, after an
    /// emergency collection; a second refusal of the same request is a
    /// memory trip. A first refusal stays pending until it is either retried
    /// successfully or seen by a guard (then it is a trip).
    pub fn refused(&self, ptr: usize, osize: usize, nsize: usize) {
        let memory = &self.memory;
        let same = memory.pending.load(Ordering::Relaxed)
            && memory.pending_ptr.load(Ordering::Relaxed) == ptr
            && memory.pending_osize.load(Ordering::Relaxed) == osize
            && memory.pending_nsize.load(Ordering::Relaxed) == nsize;
        memory.pending_ptr.store(ptr, Ordering::Relaxed);
        memory.pending_osize.store(osize, Ordering::Relaxed);
        memory.pending_nsize.store(nsize, Ordering::Relaxed);
        memory.pending.store(true, Ordering::Relaxed);
        if same && self.stop.get().is_none() {
            let _ = self.stop.set(Stop::Limit(self.pending_memory_trip()));
        }
    }

    /// Allocator gate: `(ptr, osize, nsize)` succeeded; `old` bytes were
    /// replaced by `nsize` bytes.
    pub fn allocated(&self, ptr: usize, osize: usize, nsize: usize, old: usize) {
        let memory = &self.memory;
        let delta =
            i64::try_from(nsize).unwrap_or(i64::MAX) - i64::try_from(old).unwrap_or(i64::MAX);
        memory.used.fetch_add(delta, Ordering::Relaxed);
        if memory.pending.load(Ordering::Relaxed)
            && memory.pending_ptr.load(Ordering::Relaxed) == ptr
            && memory.pending_osize.load(Ordering::Relaxed) == osize
            && memory.pending_nsize.load(Ordering::Relaxed) == nsize
        {
            memory.pending.store(false, Ordering::Relaxed);
        }
    }

    /// Allocator gate: `bytes` were freed.
    pub fn freed(&self, bytes: usize) {
        self.memory
            .used
            .fetch_sub(i64::try_from(bytes).unwrap_or(i64::MAX), Ordering::Relaxed);
    }

    /// Charge `units` and check every per-request budget.
    pub fn charge(&self, units: u64) -> mlua::Result<()> {
        self.guard()?;
        let charged = self
            .charged
            .fetch_add(units, Ordering::Relaxed)
            .saturating_add(units);
        let limit = self.instruction_limit.load(Ordering::Relaxed);
        if charged > limit {
            return Err(self.trip_limit(LimitTrip::Instructions { charged, limit }));
        }
        self.check_clock()
    }

    /// Check cancellation and the wall deadline without charging.
    pub fn check_clock(&self) -> mlua::Result<()> {
        match self.clock_trip() {
            Some(trip) => Err(self.trip_limit(trip)),
            None => Ok(()),
        }
    }

    /// The trip that the clock or the cancellation flag demands now, if any.
    pub fn clock_trip(&self) -> Option<LimitTrip> {
        if self.cancel.load(Ordering::Relaxed) {
            return Some(LimitTrip::Cancelled);
        }
        let deadline = self.deadline_ns.load(Ordering::Relaxed);
        if deadline == NO_DEADLINE {
            return None;
        }
        let now = self.now_ns();
        if now > deadline {
            let started = self.started_ns.load(Ordering::Relaxed);
            return Some(LimitTrip::WallTime {
                elapsed_ms: now.saturating_sub(started) / 1_000_000,
                limit_ms: self.wall_ms.load(Ordering::Relaxed),
            });
        }
        None
    }

    /// Record a clock trip from a context that cannot raise (the allocator).
    /// Returns whether the VM is (now) stopped.
    pub fn clock_checkpoint(&self) -> bool {
        if self.stop.get().is_some() {
            return true;
        }
        if let Some(trip) = self.clock_trip() {
            let _ = self.stop.set(Stop::Limit(trip));
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meter(limit: u64) -> Meter {
        Meter::new(1 << 20, limit, Arc::new(AtomicBool::new(false)))
    }

    #[test]
    fn charging_past_the_limit_trips_and_stays_tripped() {
        let meter = meter(10);
        meter.begin(10, Duration::from_secs(10));
        assert!(meter.charge(10).is_ok());
        assert!(meter.charge(1).is_err());
        assert!(matches!(
            meter.stopped(),
            Some(Stop::Limit(LimitTrip::Instructions {
                charged: 11,
                limit: 10
            }))
        ));
        meter.begin(10, Duration::from_secs(10));
        assert!(meter.guard().is_err(), "a new budget must not clear a stop");
    }

    #[test]
    fn the_first_stop_wins() {
        let meter = meter(10);
        let _ = meter.trip_limit(LimitTrip::Cancelled);
        let _ = meter.trip(Stop::Violation("late".to_owned()));
        assert!(matches!(
            meter.stopped(),
            Some(Stop::Limit(LimitTrip::Cancelled))
        ));
    }

    #[test]
    fn an_expired_deadline_trips_on_the_next_check() {
        let meter = meter(1000);
        meter.begin(1000, Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
        assert!(meter.check_clock().is_err());
        assert!(matches!(
            meter.stopped(),
            Some(Stop::Limit(LimitTrip::WallTime { .. }))
        ));
    }

    #[test]
    fn the_hook_interval_never_exceeds_a_small_limit() {
        assert_eq!(meter(7).interval(), 7);
        assert_eq!(meter(1_000_000).interval(), HOOK_INTERVAL_MAX);
    }
}
