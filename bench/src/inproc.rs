//! In-process baselines: the same evals without a process boundary, and
//! what the instruction budget's count hook costs in Lua compute.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mlua::{Function, HookTriggers, Lua, VmState};
use quirl_lua_protocol::records::{Operation, ParentFrame, Request, Response, WorkerFrame};
use quirl_lua_protocol::{
    decode_parent_frame, decode_worker_frame, encode_parent_frame, encode_worker_frame,
};
use quirl_lua_reference_worker::{Verdict, Vm, VmConfig};

/// Compute benchmark: the classic doubly recursive Fibonacci.
pub const FIB_SOURCE: &str = "local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end return fib(27)";
/// fib(27).
pub const FIB_RESULT: i64 = 196_418;

pub type BoxError = Box<dyn std::error::Error>;

/// Time `n` calls of `f` (after `warmup`), one sample per call.
pub fn sample(
    warmup: usize,
    n: usize,
    mut f: impl FnMut() -> Result<(), BoxError>,
) -> Result<Vec<Duration>, BoxError> {
    for _ in 0..warmup {
        f()?;
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        f()?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

/// The reference worker's sandboxed VM, in this process.
pub fn sandbox_vm(policy: quirl_lua_protocol::records::Policy) -> Result<Vm, BoxError> {
    let config = VmConfig {
        policy,
        grants: None,
        process_enabled: false,
    };
    Vm::new(&config, Arc::new(AtomicBool::new(false)), None)
        .map_err(|error| format!("sandbox VM: {error:?}").into())
}

/// One eval on the in-process sandbox; fails unless it succeeds.
pub fn sandbox_eval(vm: &mut Vm, source: &str) -> Result<serde_json::Value, BoxError> {
    match vm.handle(Operation::Eval {
        source: source.to_owned(),
    }) {
        Verdict::Success(value) => Ok(value),
        other => Err(format!("sandbox eval failed: {other:?}").into()),
    }
}

/// `eval "return 1"` in plain mlua (compile + run, like the worker does per request).
pub fn plain_eval(lua: &Lua, source: &str) -> Result<(), BoxError> {
    let value: mlua::Value = lua.load(source).eval()?;
    black_box(value);
    Ok(())
}

/// The protocol work of one round trip, in-process: encode the request,
/// decode it (worker), encode the response, decode it (parent).
pub fn codec_round(id: u64) -> Result<(), BoxError> {
    let request = ParentFrame::Request {
        request: Request {
            id,
            operation: Operation::Eval {
                source: "return 1".to_owned(),
            },
        },
    };
    let bytes = encode_parent_frame(&request)?;
    black_box(decode_parent_frame(&bytes)?);
    let response = WorkerFrame::Response {
        response: Response::success(id, 1.into()),
    };
    let bytes = encode_worker_frame(&response)?;
    black_box(decode_worker_frame(&bytes)?);
    Ok(())
}

/// How the count hook is installed for a compute measurement.
#[derive(Debug, Clone, Copy)]
pub enum Hook {
    /// No hook at all.
    None,
    /// mlua's global hook with a closure that adds to a counter.
    Mlua(u32),
    /// mlua's global hook with a closure that charges and reads the clock,
    /// as the sandbox's hook does.
    MluaClock(u32),
    /// A raw C hook (`lua_sethook`) that adds to a counter.
    Raw(u32),
}

impl Hook {
    pub fn describe(self) -> String {
        match self {
            Self::None => "plain mlua, no hook".to_owned(),
            Self::Mlua(n) => format!("plain mlua, mlua count hook every {n} (counter only)"),
            Self::MluaClock(n) => {
                format!("plain mlua, mlua count hook every {n} (charge + clock)")
            }
            Self::Raw(n) => format!("plain mlua, raw C count hook every {n}"),
        }
    }
}

static RAW_FIRINGS: AtomicU64 = AtomicU64::new(0);

unsafe extern "C-unwind" fn raw_count_hook(
    _: *mut mlua::ffi::lua_State,
    _: *mut mlua::ffi::lua_Debug,
) {
    RAW_FIRINGS.fetch_add(1, Ordering::Relaxed);
}

/// A plain VM with `hook` installed and the fib function compiled.
pub fn plain_fib(hook: Hook) -> Result<(Lua, Function), BoxError> {
    let lua = Lua::new();
    match hook {
        Hook::None => {}
        Hook::Mlua(n) => {
            let counter = Arc::new(AtomicU64::new(0));
            lua.set_global_hook(HookTriggers::new().every_nth_instruction(n), move |_, _| {
                counter.fetch_add(1, Ordering::Relaxed);
                Ok(VmState::Continue)
            })?;
        }
        Hook::MluaClock(n) => {
            let charged = Arc::new(AtomicU64::new(0));
            let epoch = Instant::now();
            let deadline = Duration::from_secs(3600);
            lua.set_global_hook(HookTriggers::new().every_nth_instruction(n), move |_, _| {
                let total = charged.fetch_add(u64::from(n), Ordering::Relaxed);
                if total > u64::MAX / 2 || epoch.elapsed() > deadline {
                    return Err(mlua::Error::runtime("budget"));
                }
                Ok(VmState::Continue)
            })?;
        }
        Hook::Raw(n) => {
            let count = i32::try_from(n).unwrap_or(i32::MAX);
            // SAFETY: sets a count hook on the main state; the hook only
            // touches an atomic counter and never raises or yields.
            unsafe {
                lua.exec_raw::<()>((), |state| {
                    mlua::ffi::lua_sethook(
                        state,
                        Some(raw_count_hook),
                        mlua::ffi::LUA_MASKCOUNT,
                        count,
                    );
                })?;
            }
        }
    }
    let function = lua.load(FIB_SOURCE).into_function()?;
    Ok((lua, function))
}

/// Run the compiled fib once and check its result.
pub fn run_fib(function: &Function) -> Result<(), BoxError> {
    let value: i64 = function.call(())?;
    if value != FIB_RESULT {
        return Err(format!("fib(27) returned {value}").into());
    }
    Ok(())
}
