//! The count hook: charges the instruction budget every interval and raises
//! the stop into Lua (SPEC §15.6, §15.8).
//!
//! The hook is a raw Lua hook, not mlua's `set_global_hook`. mlua turns an
//! error returned from a hook callback into a Lua error by first truncating
//! the stack with `lua_settop` — inside a hook that is the stack of the
//! interrupted Lua function, so truncating it runs that function's pending
//! `__close` handlers right there, inside the hook, where Lua disables hooks
//! (`allowhook` is 0 while a hook runs): a handler that loops would run with
//! no instruction accounting at all. This hook raises with `lua_error`
//! directly and touches nothing else, so every to-be-closed variable is
//! closed by Lua's ordinary unwinding, after the protected call that catches
//! the error has re-enabled hooks.
//!
//! Once the VM has stopped, the hook switches the thread it fires in to a
//! count of one: from then on that thread raises the stop before every
//! instruction, so a `__close` or message handler that runs during the
//! unwinding executes no instruction of its own. Other threads stop at their
//! next firing, at most one interval later. Both are deterministic: the
//! same script with the same budget stops at the same instruction.

use crate::meter::Meter;
use mlua::{Lua, ffi};
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

/// Registry key (its address) of the light userdata pointing at the VM's
/// [`Meter`].
static METER_KEY: u8 = 0;
/// Registry key (its address) of the error value the hook raises. It is kept
/// in the registry so that pushing it never allocates (the VM may be out of
/// memory when the hook raises).
static STOP_VALUE_KEY: u8 = 1;

/// The error value the hook raises. Guest code never sees it in a way it
/// could use: every protected-call wrapper re-raises after a stop, and a
/// handler that receives it is stopped before its first instruction.
const STOP_MESSAGE: &str = "the sandbox stopped this request";

fn key(address: &'static u8) -> *const c_void {
    std::ptr::from_ref(address).cast()
}

/// Install the count hook on the VM's main thread with the meter's interval.
/// Coroutines created afterwards inherit it (Lua copies the hook into new
/// threads). Installing it again resets the main thread's instruction
/// counter, which is what a budget reset wants.
pub fn install(lua: &Lua, meter: &Arc<Meter>) -> mlua::Result<()> {
    let count = c_int::try_from(meter.interval()).unwrap_or(c_int::MAX);
    // The meter must outlive every hook firing, including the `__close`
    // handlers `lua_close` may run while the VM is dropped; like the
    // allocator gate's state it is leaked, once per VM.
    let leaked = {
        let meter = Arc::clone(meter);
        move || Arc::into_raw(meter).cast_mut().cast::<c_void>()
    };
    // SAFETY: `exec_raw` runs the closure in a protected call on the VM's
    // state with the stack guarded. Every call below either cannot fail or
    // raises a Lua memory error that the protected call catches. The main
    // thread is taken from the registry, so the hook lands on it even if the
    // state handed to us were a coroutine's.
    unsafe {
        lua.exec_raw::<()>((), |state| {
            if ffi::lua_rawgetp(state, ffi::LUA_REGISTRYINDEX, key(&METER_KEY))
                != ffi::LUA_TLIGHTUSERDATA
            {
                ffi::lua_pushlightuserdata(state, leaked());
                ffi::lua_rawsetp(state, ffi::LUA_REGISTRYINDEX, key(&METER_KEY));
                ffi::lua_pushlstring(state, STOP_MESSAGE.as_ptr().cast(), STOP_MESSAGE.len());
                ffi::lua_rawsetp(state, ffi::LUA_REGISTRYINDEX, key(&STOP_VALUE_KEY));
            }
            ffi::lua_settop(state, 0);
            ffi::lua_rawgeti(state, ffi::LUA_REGISTRYINDEX, ffi::LUA_RIDX_MAINTHREAD);
            let main = ffi::lua_tothread(state, -1);
            ffi::lua_settop(state, 0);
            if !main.is_null() {
                ffi::lua_sethook(main, Some(count_hook), ffi::LUA_MASKCOUNT, count);
            }
        })
    }
}

/// Offset of `basehookcount` in Lua 5.4's `lua_State` (LP64), the count a
/// thread's hook was set with; `hookcount`, the instructions left until the
/// hook fires, follows it. [`check_thread_layout`] verifies both when the VM
/// is built.
const BASEHOOKCOUNT_OFFSET: usize = 184;
const HOOKCOUNT_OFFSET: usize = BASEHOOKCOUNT_OFFSET + 4;

/// Read the `c_int` at `offset` bytes into the thread `state`.
///
/// # Safety
/// `state` is a live `lua_State` whose layout [`check_thread_layout`] has
/// verified; `offset` is one of the two offsets above, inside the struct.
unsafe fn read_count(state: *mut ffi::lua_State, offset: usize) -> c_int {
    // SAFETY: see the function's contract; the field is an aligned `int`.
    unsafe { state.cast::<u8>().add(offset).cast::<c_int>().read() }
}

/// Whether the linked Lua keeps a thread's hook counts at the offsets this
/// module reads: a fresh thread's hook set with two different counts must
/// show each count in both fields (`lua_sethook` resets the counter to the
/// count).
pub fn check_thread_layout(lua: &Lua) -> mlua::Result<bool> {
    // SAFETY: `exec_raw` runs the closure in a protected call; the new thread
    // stays on the stack (alive) while its fields are read, and it never runs.
    unsafe {
        lua.exec_raw((), |state| {
            let thread = ffi::lua_newthread(state);
            let mut ok = true;
            for count in [12_345, 777] {
                ffi::lua_sethook(thread, Some(count_hook), ffi::LUA_MASKCOUNT, count);
                ok &= read_count(thread, BASEHOOKCOUNT_OFFSET) == count
                    && read_count(thread, HOOKCOUNT_OFFSET) == count
                    && ffi::lua_gethookcount(thread) == count;
            }
            ffi::lua_sethook(thread, None, 0, 0);
            ffi::lua_settop(state, 0);
            ffi::lua_pushboolean(state, c_int::from(ok));
        })
    }
}

/// The instructions `state` executed since its count hook last fired (or
/// its counter was last reset), which no firing has charged; resets its
/// counter, so each instruction is counted once. Coroutines are settled
/// whenever control returns from them (SPEC §15.7): a coroutine that dies
/// between two firings would otherwise take its uncounted instructions
/// with it.
///
/// # Safety
/// `state` is a live thread of this VM, and [`check_thread_layout`] has
/// returned `true` for the VM.
pub unsafe fn settle_thread(state: *mut ffi::lua_State) -> u64 {
    // SAFETY: reading the hook fields and re-setting the same hook with the
    // same mask and count neither allocates nor raises; Lua allows setting
    // any thread's hook (its own debug.sethook does).
    unsafe {
        let mask = ffi::lua_gethookmask(state);
        let count = ffi::lua_gethookcount(state);
        if mask & ffi::LUA_MASKCOUNT == 0 || count <= 0 {
            return 0;
        }
        let left = read_count(state, HOOKCOUNT_OFFSET);
        ffi::lua_sethook(state, ffi::lua_gethook(state), mask, count);
        u64::try_from(count.saturating_sub(left)).unwrap_or(0)
    }
}

/// Charge one interval; `true` when the VM is (now) stopped.
#[inline(never)]
fn charge_interval(meter: &Meter) -> bool {
    meter.charge(meter.interval()).is_err()
}

unsafe extern "C-unwind" fn count_hook(state: *mut ffi::lua_State, _ar: *mut ffi::lua_Debug) {
    // SAFETY: a hook runs with at least LUA_MINSTACK free slots; `rawgetp`
    // on the registry neither allocates nor raises, and the pointer stored
    // under METER_KEY is the leaked `Arc<Meter>` from `install`, valid for
    // the life of the process.
    let meter = unsafe {
        ffi::lua_rawgetp(state, ffi::LUA_REGISTRYINDEX, key(&METER_KEY));
        let pointer = ffi::lua_touserdata(state, -1).cast_const().cast::<Meter>();
        ffi::lua_settop(state, -2);
        pointer.as_ref()
    };
    let Some(meter) = meter else {
        return;
    };
    if !charge_interval(meter) {
        return;
    }
    // SAFETY: no Rust value with a destructor is alive in this frame, so the
    // `longjmp` of `lua_error` skips nothing; raising from a count hook is
    // allowed by Lua (lua.c's own interrupt hook does it). `lua_sethook` on
    // the running thread from its own hook is allowed. The stop value is an
    // interned string kept alive by the registry, so pushing it does not
    // allocate.
    unsafe {
        ffi::lua_sethook(state, Some(count_hook), ffi::LUA_MASKCOUNT, 1);
        ffi::lua_rawgetp(state, ffi::LUA_REGISTRYINDEX, key(&STOP_VALUE_KEY));
        ffi::lua_error(state)
    }
}

/// Raise the stop from a C function the guest called (the sandbox's
/// `guard`): the same preallocated value the hook raises, with
/// `lua_error`. Unlike an error returned by an mlua callback, this builds
/// no traceback, which at the bottom of a deep stack costs a walk of the
/// whole stack per raise, and after a stop nothing charges it (SPEC §15.8).
///
/// # Safety
/// `state` must be the running thread inside a C function with a free stack
/// slot (every C function has `LUA_MINSTACK`), and no Rust value with a
/// destructor may be alive in the calling frames up to Lua.
pub(crate) unsafe fn raise_stop(state: *mut ffi::lua_State) -> ! {
    // SAFETY: per the contract; the stop value is kept alive by the
    // registry (installed with the hook), so pushing it does not allocate.
    unsafe {
        ffi::lua_rawgetp(state, ffi::LUA_REGISTRYINDEX, key(&STOP_VALUE_KEY));
        ffi::lua_error(state)
    }
}
