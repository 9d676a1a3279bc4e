//! The allocator gate: a thin allocator placed in front of mlua's limited
//! allocator.
//!
//! mlua enforces the memory limit (`Lua::set_memory_limit`) but only reports
//! a refusal as a Lua memory error, which guest `pcall` can catch and which a
//! `__close` handler can replace. The gate sees every allocation of the VM
//! and tells the [`Meter`] about each refusal, so a memory trip is recorded
//! in Rust no matter what the guest does with the error afterwards. It also
//! uses allocation growth as a clock checkpoint: native functions that build
//! large results allocate as they go, and the gate refuses the allocation
//! that finds the wall deadline passed.
//!
//! The gate delegates every call to the allocator that was installed before
//! it (mlua's, which enforces the limit), so the memory accounting and the
//! limit itself stay mlua's.

use crate::meter::Meter;
use mlua::{Lua, ffi};
use std::os::raw::c_void;
use std::sync::Arc;

/// State behind the gate's `ud` pointer. Leaked on purpose: it must outlive
/// the Lua state, and a VM is never closed while the process runs.
struct Gate {
    inner: ffi::lua_Alloc,
    inner_ud: *mut c_void,
    meter: Arc<Meter>,
}

unsafe extern "C" fn gate_alloc(
    ud: *mut c_void,
    ptr: *mut c_void,
    osize: usize,
    nsize: usize,
) -> *mut c_void {
    // SAFETY: `ud` is the leaked `Gate` installed by `install`; it is never
    // freed and only read here.
    let gate = unsafe { &*(ud as *const Gate) };
    // For a new block Lua passes the object type in `osize`, not a size.
    let old = if ptr.is_null() { 0 } else { osize };
    if nsize == 0 {
        // SAFETY: delegating a free to the allocator that allocated the block.
        let result = unsafe { (gate.inner)(gate.inner_ud, ptr, osize, nsize) };
        if !ptr.is_null() {
            gate.meter.freed(osize);
        }
        return result;
    }
    if nsize > old && !gate.meter.before_growth((nsize - old) as u64) {
        // The clock stopped the request: refuse, and Lua raises a memory
        // error that every guard turns into the recorded wall-time stop.
        return std::ptr::null_mut();
    }
    // SAFETY: same arguments Lua gave us, forwarded to the original allocator.
    let result = unsafe { (gate.inner)(gate.inner_ud, ptr, osize, nsize) };
    if result.is_null() {
        if nsize > old {
            gate.meter.refused(ptr as usize, osize, nsize);
        }
    } else {
        gate.meter.allocated(ptr as usize, osize, nsize, old);
    }
    result
}

/// Put the gate in front of the VM's current allocator. Call once, after
/// `Lua::set_memory_limit` (mlua only finds its memory state while its own
/// allocator is installed) and while no Lua code is running.
pub fn install(lua: &Lua, meter: Arc<Meter>) {
    meter.set_used_memory(lua.used_memory() as u64);
    let state = lua.state();
    let mut inner_ud: *mut c_void = std::ptr::null_mut();
    // SAFETY: `state` is the VM's live main state; reading the allocator
    // does not allocate or run code.
    let inner = unsafe { ffi::lua_getallocf(state, &mut inner_ud) };
    let gate = Box::into_raw(Box::new(Gate {
        inner,
        inner_ud,
        meter,
    }));
    // SAFETY: the gate forwards to the previous allocator with its own user
    // data, so blocks allocated before and after the switch are handled by
    // the same function; `gate` is leaked and outlives the state.
    unsafe { ffi::lua_setallocf(state, gate_alloc, gate.cast::<c_void>()) };
}
