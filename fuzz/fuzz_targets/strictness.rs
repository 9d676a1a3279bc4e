#![no_main]
//! libFuzzer wrapper; the logic is `quirl_lua_testkit::targets::strictness`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| quirl_lua_testkit::targets::strictness(data));
