#![no_main]
//! libFuzzer wrapper; the logic is `quirl_lua_testkit::sessions::worker_session`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| quirl_lua_testkit::sessions::worker_session(data));
