#![no_main]
//! libFuzzer wrapper; the logic is `quirl_lua_testkit::lua_programs::run`.

use libfuzzer_sys::fuzz_target;

/// AddressSanitizer's defaults for this target (the sanitizer's documented
/// hook; `ASAN_OPTIONS` still overrides them, and leak detection stays on).
///
/// Lua raises every error with `longjmp`, and with stack-use-after-return
/// detection ASan collects its fake stack on each `longjmp`: a program whose
/// `pcall` or `table.sort` comparator fails 50,000 times then spends ~27 µs
/// of CPU per budget unit in `__asan::FakeStack::GC` (the same program
/// without ASan: 0.1 µs), so the target's CPU-per-unit check would measure
/// the sanitizer instead of the metered VM.
#[unsafe(no_mangle)]
pub extern "C" fn __asan_default_options() -> *const std::ffi::c_char {
    c"detect_stack_use_after_return=0".as_ptr()
}

fuzz_target!(
    init: {
        // The worker binaries' allocation path: lmem.c with the C library's
        // malloc/realloc/free (DESIGN §15.6, "The allocator"), here under
        // AddressSanitizer and LeakSanitizer. The stable replay of this
        // target (`generated_programs.rs`) runs the `mlua` allocator path.
        // SAFETY: this binary declares no `#[global_allocator]`: Rust's
        // allocator is `System`, whose blocks are the C library's.
        unsafe { quirl_lua_testkit::lua_programs::declare_system_allocator() };
    },
    |data: &[u8]| quirl_lua_testkit::lua_programs::run(data)
);
