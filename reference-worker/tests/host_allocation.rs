//! Allocations the host makes in the VM (a callback's strings and tables)
//! are held to the memory limit like the guest's own (DESIGN §15.6), and a
//! refusal there is an error the Rust code sees, never a `longjmp` over
//! its frames: `mlua` protects such allocations only where it knows they
//! can fail, which the meter tells it (`Meter::attach`).
//!
//! And a state that allocates with the C library directly
//! (`declare_system_allocator`, as the worker binaries do) runs, trips,
//! collects and closes like one that allocates through `mlua`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mlua::{Lua, Value};
use quirl_lua_reference_worker::budget::{LimitTrip, Meter, Stop};
use quirl_lua_reference_worker::sandbox;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const LIMIT: u64 = 4 << 20;

/// Sets its flag when dropped: proof that its frame was unwound.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn metered() -> (Arc<Meter>, Lua) {
    let meter = Arc::new(Meter::new(
        LIMIT,
        1_000_000,
        Arc::new(AtomicBool::new(false)),
    ));
    let sandbox = sandbox::build(&meter).unwrap();
    meter.attach(&sandbox.lua);
    (meter, sandbox.lua)
}

fn assert_memory_trip(meter: &Meter) {
    match meter.stopped() {
        Some(Stop::Limit(LimitTrip::Memory { limit, .. })) => assert_eq!(limit, LIMIT),
        other => panic!("expected a memory trip, got {other:?}"),
    }
}

#[test]
fn a_refused_allocation_in_a_host_callback_unwinds_its_rust_frames() {
    for make in ["string", "table"] {
        let (meter, lua) = metered();
        let unwound = Arc::new(AtomicBool::new(false));
        let seen = unwound.clone();
        let callback = lua
            .create_function(move |lua, (kind, size): (String, usize)| {
                let _guard = SetOnDrop(seen.clone());
                if kind == "string" {
                    Ok(Value::String(lua.create_string(vec![b'x'; size])?))
                } else {
                    Ok(Value::Table(lua.create_table_with_capacity(size, 0)?))
                }
            })
            .unwrap();
        lua.globals().raw_set("make", callback).unwrap();
        meter.begin(1_000_000, Duration::from_secs(60));
        let result = lua
            .load(format!("return make('{make}', 8 * 1024 * 1024)"))
            .eval::<Value>();
        meter.end();
        assert!(result.is_err(), "{make}: {result:?}");
        assert!(
            unwound.load(Ordering::SeqCst),
            "{make}: the refusal skipped the callback's Rust frames (longjmp)"
        );
        assert_memory_trip(&meter);
    }
}

#[test]
fn a_state_allocating_with_the_c_library_runs_trips_and_closes() {
    // SAFETY: this test binary declares no `#[global_allocator]`.
    unsafe { quirl_lua_reference_worker::declare_system_allocator() };
    for _ in 0..20 {
        let (meter, lua) = metered();
        meter.begin(100_000_000, Duration::from_secs(60));
        // Tables, strings and closures, grown, shrunk and collected.
        let total: i64 = lua
            .load(
                "local function make(d) if d == 0 then return {} end
                   return { make(d - 1), make(d - 1) } end
                 local function count(t) if t[1] then return 1 + count(t[1]) + count(t[2]) end return 1 end
                 local n = 0
                 for i = 1, 20 do n = n + count(make(8)) end
                 local s = {} for i = 1, 2000 do s[i] = ('x'):rep(i % 97) .. i end
                 for i = 1, 2000 do s[i] = nil end
                 collectgarbage()
                 return n",
            )
            .eval()
            .unwrap();
        assert_eq!(total, 20 * 511);
        meter.end();
        // Past the limit: a memory trip, then the state still closes.
        meter.begin(100_000_000, Duration::from_secs(60));
        let result = lua
            .load("local t = {} for i = 1, 1e9 do t[i] = ('y'):rep(64) .. i end")
            .exec();
        meter.end();
        assert!(result.is_err());
        assert_memory_trip(&meter);
        drop(lua);
    }
}
