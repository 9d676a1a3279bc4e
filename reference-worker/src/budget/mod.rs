//! The budgets of a request (DESIGN §15.6, §15.8): what a request, a test
//! function or a callback may spend, where each unit is charged, and how a
//! stop becomes an error.
//!
//! The counting itself lives in the metered Lua VM this repository builds
//! (`reference-worker/metered-lua/`: `c/lmeter.c` and one patch per Lua
//! source file, `patches/NAME.patch`, each hunk listed in that crate's
//! README). This module is the worker's side of it:
//!
//! - [`meter`]: the handle on one VM's meter: opens and closes budget
//!   windows, charges host work, records the stops only the worker sees
//!   (host-call budget, a `resource_limit` host error, a protocol violation
//!   during a host call), the memory limit and the cancellation flag it
//!   hands to the VM;
//! - [`window`]: the limits of a window from `initialize`'s policy:
//!   `instruction_limit`, the wall deadline (`wall_time_ms`, or a
//!   callback's own deadline capped by it), the memory limit the sandbox
//!   must fit;
//! - [`stop`]: the sticky stop record and the `resource_limit` error record
//!   each trip is answered with (`limit: instructions|wall_time|memory|
//!   cancellation|host_calls`, then `observed: …; limit: …`).
//!
//! # Where each charge is made, and which test checks it
//!
//! One row per row of DESIGN §15.6's cost audit table. *Charged in* names
//! the patch of `metered-lua/patches/` and the stock Lua function it
//! changes; "dispatch" is the count of one unit per dispatched VM
//! instruction in every thread (`lvm.c.patch`: `vmfetch` through
//! `luaQ_left`; the slice is accounted and the clock and cancellation flag
//! checked by `luaQ_poll` in `c/lmeter.c`); "allocation" is one unit per
//! 64 bytes allocated (`lmem.c.patch`: `luaM_realloc_`, `luaM_malloc_`,
//! through `luaQ_grow` in `c/lmeter.h`). *Tests* are functions of
//! `reference-worker/tests/FILE.rs`, written `FILE::test`, or unit tests,
//! written with their module path; "—" marks an O(1) row that no test
//! checks on its own (the dispatch tests cover it).
//!
//! | audit row (DESIGN §15.6) | charged in | tests |
//! |---|---|---|
//! | VM arithmetic, bitwise, number comparisons, jumps, calls, upvalues | dispatch | `sandbox::an_infinite_loop_trips_the_instruction_budget`, `sandbox::a_tiny_instruction_limit_is_respected`, `budgets::a_trip_happens_at_the_same_point_every_time`, `dispatch_trap::a_forced_dispatch_counts_exactly_one_unit`, `dispatch_trap::a_limit_trips_exactly_while_every_dispatch_is_forced` |
//! | `..` (concatenation) | allocation | `budgets::long_strings_in_vm_operations_are_charged` |
//! | `<`, `<=` on strings | `lvm.c.patch`: `l_strcmp`, window by window, each charged before it is compared | `budgets::long_strings_in_vm_operations_are_charged`, `audit_paths::comparisons_of_strings_of_unequal_lengths_are_charged_by_the_bytes_compared` |
//! | `==` on long strings, `rawequal`, long-string table keys | `lstring.c.patch`: `luaS_eqlngstr` | `budgets::long_strings_in_vm_operations_are_charged` |
//! | arithmetic on strings, numeric-string arguments | `lobject.c.patch`: `luaO_str2num`, per 16 bytes | `budgets::string_to_number_conversions_are_charged` |
//! | `#` on strings and on tables without `__len` | dispatch | — |
//! | indexing, assignment, `rawset`; rehash | `ltable.c.patch`: `rehash` per 16 old slots, after a fixed number of new keys (`luaH_newkey` never reuses a node); the new parts by allocation; number and pointer keys hashed through a keyed mix (`luaQ_mix`), long strings through a keyed hash (`lstring.c.patch`, `luaQ_hashlong`), compared by hash first (`equalkey`) | `budgets::rehashes_at_the_same_size_are_charged_for_the_slots_they_count`, `budgets::table_resizes_are_charged_by_what_they_allocate`, `audit_paths::number_keys_that_share_lua_s_own_hash_do_not_share_a_chain`, `budget_determinism::generated_table_churn_programs_end_the_same_way_in_separate_processes`, `budget_determinism::the_issue_examples_trip_at_the_same_unit_in_twenty_processes` |
//! | metamethods (guest code) | dispatch; a `__call` chain per step (`ldo.c.patch`: `tryfuncTM`); after a stop every instruction raises it (`luaQ_raise`) | `budgets::close_handlers_after_a_hook_trip_are_stopped`, `sandbox::error_objects_with_looping_tostring_end_in_a_limit`, `sandbox::close_handlers_cannot_rescue_a_stopped_request`, `audit_paths::a_call_metamethod_that_leads_back_to_itself_ends_by_the_budget` |
//! | `__index`, `__newindex` chains of tables | `lvm.c.patch`: `luaV_finishget`, `luaV_finishset` | `budgets::index_and_newindex_chains_are_charged_per_table_followed` |
//! | closures, tables, strings created | allocation | `sandbox::memory_bombs_trip_the_memory_limit`, `budgets::table_resizes_are_charged_by_what_they_allocate` |
//! | garbage collection | allocation (pacing); `lgc.c.patch`: marking in one step, ephemeron passes per 8 slots (`luaQ_gcslots`); `lmem.c.patch`: the emergency collection by its work (`luaQ_chargegc`); `__gc` inert (`lbaselib.c.patch`: `luaB_setmetatable`); tuning clamped (`luaB_collectgarbage`) | `sandbox::guest_finalizers_never_run`, `collector::extreme_collector_parameters_cannot_raise_cpu_per_unit_past_the_bound`, `budgets::ephemeron_chains_are_charged_for_every_pass_of_the_collector`, `own_limits::emergency_collections_at_the_memory_limit_are_charged_by_their_work` |
//! | `assert`, `getmetatable`, `setmetatable`, `rawget`, `rawset`, `rawlen`, `type`, `collectgarbage("count")`, `("isrunning")` | dispatch | — |
//! | `error` with a level | `ldebug.c.patch`: `lua_getstack`, per 8 levels | `budgets::stack_walks_are_charged_by_their_depth` |
//! | `collectgarbage()`, `"collect"`, `"step"` | `lbaselib.c.patch`: `luaB_collectgarbage`, by the collector's work count (one unit per 2), after it runs | `sandbox::collectgarbage_switches_work_and_collections_are_charged`, `budgets::collector_steps_are_charged_by_the_work_they_do` |
//! | `collectgarbage("incremental")`, `"generational"` switching the mode | `lbaselib.c.patch`: `gcswitched`, per 64 bytes of heap after the switch | `collector::extreme_collector_parameters_cannot_raise_cpu_per_unit_past_the_bound` |
//! | `select` | dispatch (its arguments were pushed by charged instructions) | `budgets::copies_of_varargs_are_charged_per_value` |
//! | `...` taken whole | `ltm.c.patch`: `luaT_getvarargs`, per 64 values | `budgets::copies_of_varargs_are_charged_per_value` |
//! | `ipairs` step | dispatch | — |
//! | `next`, `pairs` | `ltable.c.patch`: `luaH_next` through `luaQ_chargenext` (`c/lmeter.c`); a traversal continues from the node marked as the key returned last | `budgets::next_and_pairs_over_sparse_tables_are_charged`, `budgets::traversals_of_small_tables_cost_what_they_cost_in_lua`, `budgets::next_over_many_large_tables_in_turn_is_charged_per_traversal` |
//! | `pcall`, `xpcall`, error objects | dispatch; a stop is raised without a message handler (`luaQ_raise`); the stack walk of each caught error per 8 frames (`ldo.c.patch`: `stackinuse`); Rust callback errors counted 16 KiB each while they live (`lapi.c.patch`, `c/lmeter.c`: `luaQ_setudatamt`, named by [`Meter::count_host_errors`]) | `budgets::message_handlers_after_a_trip_are_stopped`, `budgets::errors_inside_a_message_handler_at_the_bottom_of_a_deep_stack_end_by_the_budget`, `sandbox::protected_calls_cannot_swallow_a_limit`, `own_limits::errors_caught_deep_in_the_stack_are_charged_for_the_stack_they_walk`, `own_limits::kept_callback_errors_count_against_the_memory_limit`, `budgets::host_error_objects_count_against_the_memory_limit_while_they_live` |
//! | error messages that name an operand or a function; tracebacks | `ldebug.c.patch`: `findsetreg`, per 64 instructions, `getbaseline` per 64 line entries; `lfunc.c.patch`: `luaF_getlocalname` per 64 locals; `lauxlib.c.patch`: `pushglobalfuncname`, per 2 loaded slots, names cut to 80 bytes (`capname`); `lobject.c.patch`: `luaO_chunkid` reads what it shows | `budgets::error_messages_that_scan_a_large_function_are_charged`, `own_limits::errors_in_a_function_with_large_line_gaps_are_charged_for_the_line_table`, `own_limits::chunk_names_and_load_modes_are_charged_or_not_read_past_what_is_shown` |
//! | `tostring` | allocation; objects print as numbers (`lauxlib.c.patch`: `luaL_tolstring`) | `budgets::tostring_shows_no_addresses_and_stays_unique` |
//! | `tonumber` | `lbaselib.c.patch`: `luaB_tonumber` per 16 bytes scanned, after the scan; `lobject.c.patch` | `budgets::string_to_number_conversions_are_charged`, `budgets::library_calls_that_end_early_pay_for_what_they_did` |
//! | `string.len`, `string.char` | dispatch; the result by allocation | — |
//! | `string.byte`, `utf8.codepoint`, `string.unpack` results | `lstrlib.c.patch`: `str_byte`, `str_unpack`; `lutf8lib.c.patch`: `codepoint` | `budgets::pack_formats_are_charged_per_byte` |
//! | `string.rep` | `lstrlib.c.patch`: `str_rep`, per copy; a result past the headroom is a memory trip | `budgets::string_rep_with_empty_pieces_does_not_loop`, `sandbox::memory_bombs_trip_the_memory_limit` |
//! | `string.sub`, `upper`, `lower`, `reverse`, `format` | allocation | `budgets::formatting_and_conversions_are_charged` |
//! | library result buffers (`luaL_Buffer` boxes) | `lauxlib.c.patch`: `resizebox` through `lua_meter_box`, held to the memory limit | `audit_paths::buffer_boxes_count_against_the_memory_limit` |
//! | `string.format` format string | `lstrlib.c.patch`: `str_format`, `%s` with flags, width or precision per 64 bytes; `getformat` reads at most 32 bytes of a specification | `budgets::formatting_and_conversions_are_charged`, `budgets::format_shows_no_addresses`, `own_limits::a_long_format_specification_is_not_read_past_its_limit` |
//! | `string.find` (literal) | `lstrlib.c.patch`: `lmemfind`, growing windows, each charged per 256 bytes `memchr` scans (64 a longer needle's `memmem`) and per candidate | `budgets::literal_finds_are_charged_for_what_they_scan_not_for_the_rest_of_the_subject` |
//! | `string.pack`, `packsize`, `unpack` | `lstrlib.c.patch`: `str_pack`, `str_packsize`, `str_unpack` per format byte; `z` per 64 bytes | `budgets::pack_formats_are_charged_per_byte`, `budgets::scans_that_end_in_an_error_are_charged` |
//! | `string.match`, `gmatch`, `gsub`, non-literal `find` | `lstrlib.c.patch`: `chargesteps` per matcher step, `setmatch` and the frontier by the set's length, `add_s` per replacement item, `nospecials` per 256 bytes | `sandbox::catastrophic_patterns_trip_the_instruction_budget`, `pattern_differential::a_catastrophic_pattern_ends_by_the_instruction_budget`, `pattern_differential::step_counts_are_deterministic`, `audit_paths::long_set_classes_are_charged_for_each_scan`, `own_limits::gsub_replacement_items_on_empty_matches_are_charged`, `own_limits::frontier_sets_are_charged_for_every_scan`, `own_limits::a_long_pattern_is_charged_for_its_search_of_special_characters` |
//! | `table.concat`, `insert`, `remove`, `move`, `unpack`, `sort` | `ltablib.c.patch`: `tconcat`, `tinsert`, `tremove`, `tmove`, `tunpack` per element as they go (`luaQ_libmoved`), `sort_comp` per comparison | `sandbox::native_loops_end_by_the_budget`, `budgets::library_calls_that_end_early_pay_for_what_they_did`, `budgets::formatting_and_conversions_are_charged` |
//! | `table.sort` comparator | dispatch; the default comparator on strings as `<` | `budgets::long_strings_in_vm_operations_are_charged` |
//! | `table.pack` | allocation | — |
//! | `utf8.char` | allocation | — |
//! | `utf8.len`, `utf8.offset` | `lutf8lib.c.patch`: `utflen`, `byteoffset`, per 16 bytes walked, after the walk | `budgets::utf8_scans_are_charged`, `budgets::utf8_offset_and_len_are_charged_for_the_bytes_they_walk_not_for_the_whole_string` |
//! | `utf8.codes` step | `lutf8lib.c.patch`: `iter_aux`, per 16 bytes advanced | `budgets::utf8_scans_are_charged` |
//! | `math.*` | dispatch (numeric strings as above) | `budgets::string_to_number_conversions_are_charged` |
//! | `coroutine.create`, `wrap` | dispatch, in every thread | `budgets::short_lived_coroutines_are_charged_every_instruction_they_run`, `budgets::many_short_generators_cost_about_what_they_run`, `sandbox::coroutines_cannot_hide_instructions_from_the_budget` |
//! | `coroutine.resume`, `yield`, `status`, `running`, `isyieldable`, `close` | dispatch; after a stop nothing runs | `budgets::close_handlers_in_coroutines_after_a_trip_are_stopped`, `budgets::a_coroutine_suspended_across_requests_is_charged_in_the_request_that_runs_it` |
//! | `os.date` (grant `lua.os`) | `loslib.c.patch`: `os_date`, `LUAQ_DATE_CONVERSION` units per conversion; the result by allocation | `lua_os::os_date_is_charged_per_conversion` |
//! | `os.clock`, `os.time` with a table (grant `lua.os`) | `loslib.c.patch`: `os_clock` (`LUAQ_OS_CLOCK`), `os_time` (`LUAQ_OS_MKTIME`) | `lua_os::the_clock_and_mktime_are_charged_per_call` |
//! | `io.read`, `lines` (grant `lua.io`) | one unit per format read, results by allocation; the whitespace `read("n")` skips per 16 bytes (`crate::sandbox::io`: `g_read`, `read_number`) | `lua_io::reading_whitespace_is_charged`, `lua_io::each_format_a_lines_iterator_repeats_is_charged` |
//! | `print`, `io.write` (grant `lua.io`) | dispatch; arguments by their own charges; at most the capture bound copied per request (`crate::sandbox::process_view`) | `lua_io::output_past_the_capture_bound_fails_as_on_a_full_device_and_is_reported` |
//! | `os.getenv` (grant `lua.os`), `io.open`, `io.popen` (grant `lua.io`) | the name per 256 bytes, the mode per 16, before either is read (`crate::sandbox::os`: `os_getenv`; `crate::sandbox::io`: `opt_bytes`) | `own_limits::long_arguments_of_the_sandbox_s_own_functions_are_charged_before_they_are_read` |
//! | `quirl.*` | `crate::sandbox::sdk`: every function checks [`Meter::guard`]; `quirl.process.run` its command per 16 bytes before it is converted or checked (`charged_command`; `own_limits::long_arguments_of_the_sandbox_s_own_functions_are_charged_before_they_are_read`), the clock before and after its host call and the host-call budget | `serve::a_seventeenth_host_call_trips_a_sticky_limit_that_pcall_cannot_swallow`, `serve::a_host_resource_limit_stops_the_request` |
//!
//! # The limits outside the audit table
//!
//! | limit (DESIGN §15.6) | enforced in | tests |
//! |---|---|---|
//! | instruction limit, exact | `c/lmeter.c`: `luaQ_poll` (a slice never passes the limit); [`window::Limits::begin`] per window | `budget::meter::tests::the_instruction_limit_is_exact`, `sandbox::budgets_reset_for_every_request` |
//! | compiling guest text | `lzio.c.patch`: `luaZ_fill` per 4 bytes read; `lcode.c.patch`, `lparser.c.patch`: jump, label and goto list walks, a multiple assignment's conflict checks; `lbaselib.c.patch`: `load`'s mode and chunk name per 256 bytes; `loadlib.c.patch`: `require` per searcher | `lua_load::compiling_one_chunk_is_charged_by_its_size`, `audit_paths::long_elseif_chains_are_charged_while_they_compile`, `own_limits::require_is_charged_per_searcher_it_calls` |
//! | every loop the guest can drive (`metered-lua/LOOPS.md`) | classified as bounded by a constant, charged or bounded by charged work, extracted from the sources | `quirl-lua-metered-vm`'s `loop_inventory` test |
//! | memory limit | `lmem.c.patch`: `luaM_realloc_`, `tryagain` (the retry after the emergency collection; a second refusal is a memory trip); the host's error objects (`luaQ_setudatamt`); [`window::Limits::check_baseline`] | `sandbox::memory_bombs_trip_the_memory_limit`, `sandbox::a_memory_limit_below_the_sandbox_is_refused`, `budget::window::tests::a_memory_limit_the_sandbox_fills_is_refused`, `own_limits::kept_callback_errors_count_against_the_memory_limit` |
//! | wall time | `c/lmeter.c`: the clock at every slice and every 256 KiB of allocation; [`Meter::check_clock`] in host code; [`window::Limits::begin`] caps a callback's deadline | `sandbox::the_wall_deadline_stops_a_request`, `budget::meter::tests::an_expired_deadline_trips_on_the_next_check`, `budget::window::tests::a_window_is_capped_by_the_policy_wall_time` |
//! | cancellation | `c/lmeter.c`: the flag [`Meter::attach`] hands over, read where the clock is | `sandbox::cancellation_is_observed_by_the_hook`, `pattern_differential::a_cancelled_match_stops_at_the_next_batch` |
//! | host calls per request | `crate::sandbox::sdk` (`quirl.process.run`), a sticky [`LimitTrip::HostCalls`] | `serve::a_seventeenth_host_call_trips_a_sticky_limit_that_pcall_cannot_swallow` |
//! | a stop is sticky, the first wins | `c/lmeter.c`: `record_stop`; [`Meter::trip`] | `budget::meter::tests::the_first_stop_wins`, `budget::meter::tests::charging_past_the_limit_trips_and_stays_tripped`, `sandbox::a_stopped_vm_stays_stopped` |

pub mod meter;
pub mod stop;
pub mod window;

pub use meter::{BYTES_PER_UNIT, Meter};
pub use stop::{LimitTrip, Stop, StopSignal, stop_error};
pub use window::Limits;
