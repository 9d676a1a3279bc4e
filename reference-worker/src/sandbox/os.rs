//! The `os` table of the capability `lua.os` (SPEC §7.1, DESIGN §15.3 "The
//! `lua.os` capability").
//!
//! `os.time`, `os.clock`, `os.date` and `os.difftime` are Lua's own C
//! functions (`loslib.c`: stock arguments, results and errors; `os.date`
//! charged per conversion by the metered VM's `loslib.c` hunk), on the
//! host's real clock and time zone. `os.getenv` and `os.exit` are the
//! worker's: `getenv` finds only the variables the request declares (the
//! runner ABI's environment, `super::process_view`), and `exit` ends the
//! request at once, as a stop of the metered VM that no guest code runs
//! after (`Meter::exited`), with its status recorded for the runner ABI.
//! `execute`, `remove`, `rename`, `tmpname` and `setlocale` are absent.
//!
//! The two functions of the worker are C functions written against Lua's C
//! API (`mlua::ffi`), not `mlua` callbacks: a callback raises its errors as
//! userdata with a traceback, while Lua's own functions raise strings with
//! the caller's position (`eval:1: bad argument #1 to 'getenv' (string
//! expected, got table)`), and a guest must see the same from these.
//!
//! # Time zone and the lockdown
//!
//! `os.date` and `os.time` read the time zone through the C library, which
//! loads it once (`tzset`) and, for `mktime`, checks again whether `TZ`
//! changed — with a `stat` of `/etc/localtime` when `TZ` is unset, a system
//! call the worker's seccomp filter kills (DESIGN §18.3).
//! [`pin_time_zone`], at process start (the binaries' `main`), sets `TZ`
//! to `:/etc/localtime`
//! when it is unset (what the C library reads then anyway), and [`install`]
//! loads the zone before the lockdown; after that neither function makes a
//! system call but `clock_gettime` (`os.clock`, `os.time`).

use super::capabilities::OS_MEMBERS;
use super::process_view::ProcessView;
use mlua::{Function, LightUserData, Lua, Table, ffi};
use quirl_lua_metered_vm as vm;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// The members of `os` that are the worker's, not `loslib.c`'s.
const WORKER_MEMBERS: &[&str] = &["exit", "getenv"];
/// Bytes of a name `getenv` checks (UTF-8) and compares per unit charged
/// (`metered-lua/LOOPS.md`): a guest's name may be as long as the memory
/// limit allows, and the same string may be passed at every call.
const NAME_BYTES_PER_UNIT: usize = 256;

/// Set `TZ` to `:/etc/localtime` where it is unset, so that the C
/// library's time functions never look at the file system again once the
/// zone is loaded (see the module docs). The zone is the same: with `TZ`
/// unset the C library reads `/etc/localtime` too.
///
/// A worker binary calls it first thing in `main` (as the reference
/// binaries do); without it, `os.time` with a table ends a locked-down
/// worker (the filter kills the `stat`): closed, not open.
///
/// # Safety
/// Changes the process environment: call it while no other thread runs
/// (at the start of `main`).
pub unsafe fn pin_time_zone() {
    if std::env::var_os("TZ").is_none() {
        // SAFETY: the caller guarantees that no other thread runs, so
        // nothing reads the environment concurrently.
        unsafe { std::env::set_var("TZ", ":/etc/localtime") };
    }
}

/// Keep only [`OS_MEMBERS`] in the `os` table that `loslib.c` opened,
/// replace `getenv` and `exit` with the worker's, reading `view`, and load
/// the time zone. `os` must be a global of `lua` (opened by the sandbox
/// build).
pub fn install(lua: &Lua, view: &Arc<ProcessView>) -> mlua::Result<()> {
    let os: Table = lua.globals().raw_get("os")?;
    super::keep_only(&os, OS_MEMBERS)?;
    let context = LightUserData(Arc::as_ptr(view).cast_mut().cast::<c_void>());
    // SAFETY: `open_os` is a C function of the kind Lua calls (see its
    // own safety comment); `mlua` pushes it like any other.
    let open = unsafe { lua.create_c_function(open_os) }?;
    let functions: Table = open.call(context)?;
    for name in WORKER_MEMBERS {
        let function: Function = functions.raw_get(*name)?;
        os.raw_set(*name, function)?;
    }
    // The view must live as long as the state: the C functions reach it
    // through the light userdata.
    lua.set_app_data(Arc::clone(view));
    // SAFETY: `tzset` only reads `TZ` and the zone file and fills the C
    // library's own zone data; nothing in this process changes `TZ` after
    // `pin_time_zone` (called before any thread starts).
    unsafe { libc_tzset() };
    Ok(())
}

unsafe extern "C" {
    /// POSIX `tzset` (not in the `libc` crate for every target).
    #[link_name = "tzset"]
    fn libc_tzset();
}

/// The view the light userdata upvalue 1 of the running C closure points
/// at.
///
/// # Safety
/// Call only from a C closure created by [`open_os`] (or `super::io`'s
/// opener), whose upvalue 1 is the light userdata of an `Arc<ProcessView>`
/// that the state keeps alive (its app data).
pub(super) unsafe fn view_of<'a>(state: *mut ffi::lua_State) -> &'a ProcessView {
    // SAFETY: the caller's contract: upvalue 1 is the pointer of a live
    // `Arc<ProcessView>`, and the state (which owns a clone) outlives the
    // call.
    unsafe { &*ffi::lua_touserdata(state, ffi::lua_upvalueindex(1)).cast::<ProcessView>() }
}

/// Build `{getenv = …, exit = …}`, each closing over argument 1, the
/// light userdata of the VM's `ProcessView`.
///
/// # Safety
/// A `lua_CFunction`: Lua calls it with a valid state. The only caller is
/// [`install`], with the light userdata of a view the state keeps alive.
unsafe extern "C-unwind" fn open_os(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: plain Lua API calls on a valid state with the stack space a
    // C function is given (LUA_MINSTACK = 20); no Rust value with a
    // destructor lives in this frame, so an error raised inside (memory)
    // skips nothing.
    unsafe {
        ffi::lua_createtable(state, 0, 2);
        ffi::lua_pushvalue(state, 1);
        ffi::lua_pushcclosure(state, os_getenv, 1);
        ffi::lua_setfield(state, -2, c"getenv".as_ptr());
        ffi::lua_pushvalue(state, 1);
        ffi::lua_pushcclosure(state, os_exit, 1);
        ffi::lua_setfield(state, -2, c"exit".as_ptr());
    }
    1
}

/// `os.getenv(name)`: the value of `name` among the variables the request
/// declares (the runner ABI's environment), else `nil`; Lua's argument
/// check (a number is converted, anything else is an error).
unsafe extern "C-unwind" fn os_getenv(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: a closure of `open_os`: upvalue 1 is the view. Lua API calls
    // on a valid state; `luaL_checklstring` may raise, before anything is
    // held (and `charge` may raise the budget's stop, likewise). The span
    // points into the view's environment, which only
    // `ProcessView::begin` changes, between requests; no value with a
    // destructor lives when `lua_pushlstring` may raise.
    unsafe {
        let mut len = 0usize;
        let name = ffi::luaL_checklstring(state, 1, &mut len).cast::<u8>();
        super::io::charge(
            state,
            i64::try_from(len / NAME_BYTES_PER_UNIT).unwrap_or(i64::MAX),
        );
        let view = view_of(state);
        match view.getenv(std::slice::from_raw_parts(name, len)) {
            Some(value) => {
                ffi::lua_pushlstring(state, value.start.cast(), value.len);
            }
            None => ffi::lua_pushnil(state),
        }
    }
    1
}

/// `os.exit([code [, close]])`: ends the request (see the module docs).
/// The status is Lua's: `true` (or none) 0, `false` 1, else the integer
/// (`close` is ignored: the state is never closed by the guest).
unsafe extern "C-unwind" fn os_exit(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: a closure of `open_os`: upvalue 1 is the view. Lua API calls
    // on a valid state; the argument check may raise before anything is
    // recorded; `lua_meter_raise` throws the meter's stop and never
    // returns, with no value with a destructor in this frame.
    unsafe {
        let status = if ffi::lua_type(state, 1) == ffi::LUA_TBOOLEAN {
            if ffi::lua_toboolean(state, 1) != 0 {
                0
            } else {
                1
            }
        } else {
            // C's `(int)` conversion of Lua's integer, as stock `os.exit`.
            ffi::luaL_optinteger(state, 1, 0) as i32
        };
        view_of(state).exit(status);
        vm::lua_meter_stop(state, vm::LUAQ_EXIT);
        vm::lua_meter_raise(state);
    }
}
