//! What the instruction budget costs in Lua compute: fib(27) in plain mlua
//! without a hook, with count hooks of several kinds and intervals, and in
//! the sandbox VM (budget hook, allocator gate, prelude wrappers); and what
//! wrapped library calls cost (`library_calls`: 40,000 calls of
//! `string.sub`, `string.format`, `table.insert` and `string.rep`, each a
//! library call around a prelude wrapper in the sandbox, DESIGN §15.11).
//!
//! ```sh
//! cargo bench -p quirl-lua-reference-worker --bench budget
//! ```
//!
//! Under `cargo test --all-targets` criterion runs each benchmark once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use mlua::{Function, HookTriggers, Lua, VmState};
use quirl_lua_protocol::records::{Operation, Policy, PolicySettings};
use quirl_lua_reference_worker::{Verdict, Vm, VmConfig};

const FIB: &str = "local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end return fib(27)";

static RAW_FIRINGS: AtomicU64 = AtomicU64::new(0);

unsafe extern "C-unwind" fn raw_count_hook(
    _: *mut mlua::ffi::lua_State,
    _: *mut mlua::ffi::lua_Debug,
) {
    RAW_FIRINGS.fetch_add(1, Ordering::Relaxed);
}

fn compiled(lua: &Lua) -> Function {
    lua.load(FIB).into_function().unwrap()
}

fn run(function: &Function) {
    assert_eq!(function.call::<i64>(()).unwrap(), 196_418);
}

fn fib(c: &mut Criterion) {
    let mut group = c.benchmark_group("fib27");
    group.sample_size(20);

    let lua = Lua::new();
    let function = compiled(&lua);
    group.bench_function("plain_no_hook", |b| b.iter(|| run(&function)));

    for interval in [1_000_u32, 10_000, 1_000_000] {
        let lua = Lua::new();
        let counter = Arc::new(AtomicU64::new(0));
        lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(interval),
            move |_, _| {
                counter.fetch_add(1, Ordering::Relaxed);
                Ok(VmState::Continue)
            },
        )
        .unwrap();
        let function = compiled(&lua);
        group.bench_function(format!("mlua_hook_every_{interval}"), |b| {
            b.iter(|| run(&function))
        });
    }

    let lua = Lua::new();
    // SAFETY: a count hook on the main state that only bumps an atomic.
    unsafe {
        lua.exec_raw::<()>((), |state| {
            mlua::ffi::lua_sethook(state, Some(raw_count_hook), mlua::ffi::LUA_MASKCOUNT, 1_000);
        })
        .unwrap();
    }
    let function = compiled(&lua);
    group.bench_function("raw_c_hook_every_1000", |b| b.iter(|| run(&function)));

    let config = VmConfig {
        policy: Policy::new(PolicySettings {
            allow_process: false,
            memory_limit_bytes: 32 << 20,
            instruction_limit: 100_000_000,
            wall_time_ms: 60_000,
        })
        .unwrap(),
        grants: None,
        process_enabled: false,
    };
    let mut vm = Vm::new(&config, Arc::new(AtomicBool::new(false)), None).unwrap();
    group.bench_function("sandbox_vm_eval", |b| {
        b.iter(|| {
            let verdict = vm.handle(Operation::Eval {
                source: FIB.to_owned(),
            });
            assert!(matches!(verdict, Verdict::Success(_)), "{verdict:?}");
        })
    });
    group.finish();
}

const LIBRARY_CALLS: &str = "local s, t = 'hello world', {}
for i = 1, 10000 do
  local a = s:sub(1, 5)
  local b = string.format('%d', i)
  table.insert(t, a)
  local c = ('x'):rep(3)
end
return #t";

fn library_calls(c: &mut Criterion) {
    let mut group = c.benchmark_group("library_calls");
    group.sample_size(20);
    let lua = Lua::new();
    let function = lua.load(LIBRARY_CALLS).into_function().unwrap();
    group.bench_function("plain_no_hook", |b| {
        b.iter(|| assert_eq!(function.call::<i64>(()).unwrap(), 10_000))
    });
    let config = VmConfig {
        policy: Policy::new(PolicySettings {
            allow_process: false,
            memory_limit_bytes: 32 << 20,
            instruction_limit: 100_000_000,
            wall_time_ms: 60_000,
        })
        .unwrap(),
        grants: None,
        process_enabled: false,
    };
    let mut vm = Vm::new(&config, Arc::new(AtomicBool::new(false)), None).unwrap();
    group.bench_function("sandbox_vm_eval", |b| {
        b.iter(|| {
            let verdict = vm.handle(Operation::Eval {
                source: LIBRARY_CALLS.to_owned(),
            });
            assert!(matches!(verdict, Verdict::Success(_)), "{verdict:?}");
        })
    });
    group.bench_function("sandbox_vm_build", |b| {
        b.iter(|| Vm::new(&config, Arc::new(AtomicBool::new(false)), None).unwrap())
    });
    group.finish();
}

criterion_group!(benches, fib, library_calls);
criterion_main!(benches);
