//! The handle on the metered VM's meter: the Rust side of the budgets.
//!
//! The budgets themselves live in the Lua state (`metered-lua/c/lmeter.c`,
//! DESIGN §15.6): the interpreter counts every instruction it dispatches,
//! native work is charged where it happens, the allocator enforces the
//! memory limit, and the clock and the cancellation flag are checked every
//! 1,024 units and every 256 KiB of allocation. The first stop is recorded
//! there and never cleared; from then on every instruction of every thread
//! raises it, without running any message handler, so no guest code runs
//! after a stop (DESIGN §15.8).
//!
//! A [`Meter`] is the worker's handle on that state: it opens and closes
//! budget windows, records the stops only the worker sees (the host-call
//! budget, a `resource_limit` host error, a protocol violation during a
//! host call) and turns the state's record into a [`Stop`] with the
//! observed values of DESIGN §15.11 (`super::stop` makes the error record).
//!
//! # What "instructions" means
//!
//! The budget is counted in *units*: one per VM instruction, in any
//! coroutine, plus the charges of native work listed in DESIGN §15.6 (one
//! unit per 64 bytes allocated, per matcher step, per element a library
//! loop visits, …). A request stops at the first unit past
//! `instruction_limit`: exactly `instruction_limit` units run, and the same
//! program with the same budget stops at the same instruction every time.

use super::stop::{LimitTrip, Stop, stop_error};
use mlua::Lua;
use quirl_lua_metered_vm as vm;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Bytes of native copying charged as one instruction unit.
pub const BYTES_PER_UNIT: u64 = 64;

/// The worker's handle on one VM's meter. Every method that reaches the
/// state is a no-op (or reports "running") before [`Meter::attach`].
#[derive(Debug)]
pub struct Meter {
    memory_limit: u64,
    instruction_limit: AtomicU64,
    wall_ms: AtomicU64,
    cancel: Arc<AtomicBool>,
    /// The main state of the VM; set once by [`Meter::attach`].
    state: AtomicPtr<vm::lua_State>,
    /// What the worker recorded as an external stop.
    external: OnceLock<Stop>,
}

impl Meter {
    /// A meter for a VM with the given memory limit and instruction limit.
    pub fn new(memory_limit: u64, instruction_limit: u64, cancel: Arc<AtomicBool>) -> Self {
        Self {
            memory_limit,
            instruction_limit: AtomicU64::new(instruction_limit),
            wall_ms: AtomicU64::new(0),
            cancel,
            state: AtomicPtr::new(std::ptr::null_mut()),
            external: OnceLock::new(),
        }
    }

    /// Tie the meter to `lua` and configure it as a sandbox: the memory
    /// limit, the cancellation flag and the sandbox behaviour (DESIGN §15.3,
    /// §15.5, §15.6). Call once, after the sandbox is built and before any
    /// guest code runs.
    ///
    /// The meter must not be used after `lua` is dropped: the VM owns every
    /// holder that calls it (the SDK's closures live in the state, and the
    /// [`Vm`](crate::Vm) drops its state before its meter).
    pub fn attach(&self, lua: &Lua) {
        let state = lua.state();
        self.state.store(state, Ordering::Release);
        let limit = usize::try_from(self.memory_limit).unwrap_or(usize::MAX);
        // SAFETY: `state` is the live main state of `lua`; the flag's
        // storage lives in the `Arc` this meter holds, which outlives the
        // state (see above), and the C side only reads it atomically.
        unsafe {
            vm::lua_meter_configure(state, limit, self.cancel.as_ptr().cast_const().cast(), 1);
        }
        // The meter refuses allocations past the limit, so every
        // allocation `mlua` makes for the host (strings, tables, a
        // callback's results) can fail. `mlua` runs those unprotected
        // while it has no memory limit of its own, and a refusal there
        // would unwind with `longjmp` over Rust frames; with a limit set it
        // protects them and returns `Error::MemoryError`. Its limit is one
        // it never reaches: the meter's is the one enforced (DESIGN §15.6).
        // `Ok` also proves the state's `lua_Alloc` is `mlua`'s own, which
        // takes its blocks from Rust's global allocator.
        let mlua_allocator = lua.set_memory_limit(isize::MAX.unsigned_abs()).is_ok();
        if mlua_allocator && vm::system_allocator_declared() {
            // SAFETY: `state` is live (above); the process declared that
            // Rust's global allocator is the C library's, and the state's
            // `lua_Alloc` is `mlua`'s, which allocates through it, so every
            // block the state holds is one `realloc`/`free` may take.
            unsafe { vm::lua_meter_libcalloc(state) };
        }
    }

    /// Count `mlua`'s error objects against the memory limit (DESIGN
    /// §15.6-d). Every error a Rust callback returns becomes a userdata
    /// whose payload keeps the error and a traceback text on the Rust heap,
    /// outside the VM's count, for as long as the guest keeps the value. The
    /// VM cuts names in tracebacks (`lauxlib.c.patch`: `capname`), so such
    /// an object holds at most a few KiB; this names the objects' metatable
    /// to the meter, which from then on counts `LUAQ_HOST_ERROR_BYTES`
    /// (16 KiB) for each one that lives (`c/lmeter.c`: `luaQ_setudatamt`).
    /// The metatable is `mlua`'s own, found by raising one such error.
    pub fn count_host_errors(&self, lua: &Lua) -> mlua::Result<()> {
        let fail = lua.create_function(|_, ()| -> mlua::Result<()> {
            Err(mlua::Error::runtime("a probe of the host's error objects"))
        })?;
        // SAFETY: `name_host_errors` is a plain C function of the Lua API
        // contract: it reads its first argument and returns no value.
        let name = unsafe { lua.create_c_function(name_host_errors) }?;
        lua.load("local fail, name = ... local _, error = pcall(fail) name(error)")
            .set_name("=host errors")
            .call::<()>((fail, name))
    }

    fn state(&self) -> Option<*mut vm::lua_State> {
        let state = self.state.load(Ordering::Acquire);
        (!state.is_null()).then_some(state)
    }

    fn status(&self) -> vm::MeterStatus {
        let mut status = vm::MeterStatus::default();
        if let Some(state) = self.state() {
            // SAFETY: the state is alive while the meter is used (see
            // `attach`); the call only fills `status`.
            unsafe { vm::lua_meter_status(state, &mut status) };
        }
        status
    }

    /// The VM's memory limit in bytes.
    pub fn memory_limit(&self) -> u64 {
        self.memory_limit
    }

    /// Reset the budgets for a new request (or test function, or callback):
    /// nothing charged, a deadline `wall` from now. A stopped VM stays
    /// stopped.
    pub fn begin(&self, instruction_limit: u64, wall: Duration) {
        self.instruction_limit
            .store(instruction_limit, Ordering::Relaxed);
        self.wall_ms.store(
            u64::try_from(wall.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        if let Some(state) = self.state() {
            let limit = i64::try_from(instruction_limit).unwrap_or(i64::MAX);
            let wall_ns = i64::try_from(wall.as_nanos()).unwrap_or(i64::MAX);
            // SAFETY: the state is alive (see `attach`).
            unsafe { vm::lua_meter_begin(state, limit, wall_ns) };
        }
    }

    /// Leave request mode: no deadline applies until the next `begin`.
    pub fn end(&self) {
        if let Some(state) = self.state() {
            // SAFETY: the state is alive (see `attach`).
            unsafe { vm::lua_meter_end(state) };
        }
    }

    /// Time left before the current deadline (zero when none is active).
    pub fn remaining(&self) -> Duration {
        match self.state() {
            // SAFETY: the state is alive (see `attach`).
            Some(state) => Duration::from_nanos(
                u64::try_from(unsafe { vm::lua_meter_remaining_ns(state) }).unwrap_or(0),
            ),
            None => Duration::ZERO,
        }
    }

    /// Units charged in the current (or last) window.
    pub fn used_units(&self) -> u64 {
        u64::try_from(self.status().used).unwrap_or(0)
    }

    /// The sticky stop record, if any.
    pub fn stopped(&self) -> Option<Stop> {
        let status = self.status();
        let trip = match status.stop {
            // An `os.exit` ends the request but stops no budget: the VM
            // answers it (`Meter::exited`) and goes on.
            vm::LUAQ_RUNNING | vm::LUAQ_EXIT => return None,
            vm::LUAQ_EXTERNAL => return self.external.get().cloned(),
            vm::LUAQ_INSTRUCTIONS => LimitTrip::Instructions {
                charged: u64::try_from(status.used).unwrap_or(0),
                limit: u64::try_from(status.limit).unwrap_or(0),
            },
            vm::LUAQ_WALLTIME => LimitTrip::WallTime {
                elapsed_ms: u64::try_from(status.elapsed_ns).unwrap_or(0) / 1_000_000,
                limit_ms: self.wall_ms.load(Ordering::Relaxed),
            },
            vm::LUAQ_MEMORY => LimitTrip::Memory {
                requested: u64::try_from(status.requested).unwrap_or(0),
                used: u64::try_from(status.memory_at_refusal).unwrap_or(0),
                limit: self.memory_limit,
            },
            _ => LimitTrip::Cancelled,
        };
        Some(Stop::Limit(trip))
    }

    /// The same as [`Meter::stopped`] (kept for callers that settle a
    /// pending record: the state records every stop where it happens).
    pub fn settle(&self) -> Option<Stop> {
        self.stopped()
    }

    /// Record a stop of the worker's own (the first stop wins) and return
    /// the error to raise.
    pub fn trip(&self, stop: Stop) -> mlua::Error {
        if let Some(state) = self.state() {
            // SAFETY: the state is alive (see `attach`).
            let kept = unsafe { vm::lua_meter_stop(state, vm::LUAQ_EXTERNAL) };
            if kept == vm::LUAQ_EXTERNAL {
                let _ = self.external.set(stop);
            }
        } else {
            let _ = self.external.set(stop);
        }
        stop_error()
    }

    /// Whether the current request was ended by the guest's `os.exit`
    /// (grant `lua.os`): the VM recorded it as a stop of its own
    /// (`LUAQ_EXIT`, `sandbox::os`), after which no guest code runs, as
    /// after any stop, but which trips no budget ([`Meter::stopped`] stays
    /// `None`) and which [`Meter::clear_exit`] lifts.
    pub fn exited(&self) -> bool {
        self.status().stop == vm::LUAQ_EXIT
    }

    /// Lift the stop of an `os.exit` (no other stop) once its request is
    /// answered: unwinding left the VM as an error caught at the top does.
    pub fn clear_exit(&self) {
        if let Some(state) = self.state() {
            // SAFETY: the state is alive (see `attach`).
            unsafe { vm::lua_meter_clearexit(state) };
        }
    }

    /// Record a limit trip.
    pub fn trip_limit(&self, trip: LimitTrip) -> mlua::Error {
        self.trip(Stop::Limit(trip))
    }

    /// Fail if the VM has stopped.
    pub fn guard(&self) -> mlua::Result<()> {
        match self.status().stop {
            vm::LUAQ_RUNNING => Ok(()),
            _ => Err(stop_error()),
        }
    }

    /// Charge `units` (host code: the SDK); fails once the VM has stopped.
    pub fn charge(&self, units: u64) -> mlua::Result<()> {
        let Some(state) = self.state() else {
            return Ok(());
        };
        let units = i64::try_from(units).unwrap_or(i64::MAX);
        // SAFETY: the state is alive (see `attach`).
        match unsafe { vm::lua_meter_charge(state, units) } {
            vm::LUAQ_RUNNING => Ok(()),
            _ => Err(stop_error()),
        }
    }

    /// Check cancellation and the wall deadline without charging.
    pub fn check_clock(&self) -> mlua::Result<()> {
        let Some(state) = self.state() else {
            return Ok(());
        };
        // SAFETY: the state is alive (see `attach`).
        match unsafe { vm::lua_meter_check(state) } {
            vm::LUAQ_RUNNING => Ok(()),
            _ => Err(stop_error()),
        }
    }

    /// Bytes the VM holds.
    pub fn used_memory(&self) -> u64 {
        u64::try_from(self.status().memory_in_use).unwrap_or(0)
    }
}

/// The Lua side of [`Meter::count_host_errors`]: names the metatable of its
/// first argument, one of `mlua`'s error objects, to the meter.
unsafe extern "C-unwind" fn name_host_errors(state: *mut vm::lua_State) -> std::os::raw::c_int {
    // SAFETY: Lua calls this with a live state; the call reads the
    // argument's metatable and pushes nothing.
    unsafe { vm::lua_meter_hosterrors(state, 1) };
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meter(limit: u64) -> (Lua, Meter) {
        let lua = Lua::new();
        let meter = Meter::new(1 << 24, limit, Arc::new(AtomicBool::new(false)));
        meter.attach(&lua);
        (lua, meter)
    }

    #[test]
    fn charging_past_the_limit_trips_and_stays_tripped() {
        let (_lua, meter) = meter(10);
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
        let (_lua, meter) = meter(10);
        let _ = meter.trip_limit(LimitTrip::Cancelled);
        let _ = meter.trip(Stop::Violation("late".to_owned()));
        assert!(matches!(
            meter.stopped(),
            Some(Stop::Limit(LimitTrip::Cancelled))
        ));
    }

    #[test]
    fn an_expired_deadline_trips_on_the_next_check() {
        let (_lua, meter) = meter(1000);
        meter.begin(1000, Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
        assert!(meter.check_clock().is_err());
        assert!(matches!(
            meter.stopped(),
            Some(Stop::Limit(LimitTrip::WallTime { .. }))
        ));
    }

    #[test]
    fn the_instruction_limit_is_exact() {
        let (lua, meter) = meter(1000);
        // A loop whose instruction count is known: a trip at exactly the
        // first unit past the limit reports limit + 1 charged units.
        meter.begin(1000, Duration::from_secs(10));
        let result = lua.load("local x = 0 while true do x = x + 1 end").exec();
        assert!(result.is_err());
        assert!(matches!(
            meter.stopped(),
            Some(Stop::Limit(LimitTrip::Instructions {
                charged: 1001,
                limit: 1000
            }))
        ));
    }
}
