#![no_main]
//! libFuzzer wrapper; the logic is `quirl_lua_testkit::targets::validation`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| quirl_lua_testkit::targets::validation(data));
