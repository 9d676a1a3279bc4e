//! The sandbox: what guest code can see and do (DESIGN §15.3, §15.5, §15.9).
//!
//! This file builds the restricted Lua 5.4 environment: the globals, the
//! library tables and the protected string metatable. [`grants`] decides
//! which capabilities a VM holds (Quirl's default grants, scoped
//! `process.spawn:<program>` grants), [`capabilities`] lists the worker
//! capabilities that change the environment (`lua.load`, `lua.os`,
//! `lua.io`) and what each adds, [`os`] and [`io`] build the tables of the
//! last two over the request's [`process_view`], and [`sdk`] installs the
//! `quirl` table, the only way guest code reaches the worker or the parent.
//! What the guest's work costs is `crate::budget`'s (its head comment maps
//! every charge to its code and test).
//!
//! [`build`] creates a VM with only `base`, `string`, `table`, `math`,
//! `utf8` and `coroutine`, removes `string.dump`, protects the shared
//! string metatable and prunes the globals to [`GLOBALS`] (DESIGN §15.3). It
//! runs no Lua of its own: the VM is the metered Lua of
//! `quirl-lua-metered-vm`, whose library functions charge their own work
//! and, once the VM owner attaches the meter ([`Meter::attach`]), never
//! mark an object for finalization (`__gc` is inert), clamp the
//! collector's tuning parameters and print objects as numbers instead of
//! addresses (DESIGN §15.3, §15.5,
//! §15.6). It does not configure the budgets (the VM owner does that once
//! the SDK is installed, see `vm/mod.rs`), and it knows nothing about the
//! protocol.
//!
//! Removed: `load`, `loadstring`, `loadfile`, `dofile`, `require`, `print`,
//! `warn`, `io`, `os`, `package`, `debug` and `string.dump` (the
//! capabilities below bring some back, never `loadstring`, `loadfile`,
//! `dofile`, `warn`, `debug` or `string.dump`).
//!
//! With the worker capability [`LUA_LOAD_GRANT`] (SPEC §7.1, DESIGN §15.3 "The
//! `lua.load` capability") [`build_with`] keeps three more globals: Lua's
//! own `load` (the C `luaB_load`: stock arguments, chunk names and
//! messages), `require` and a `package` table of only `loaded`, `preload`
//! and a `searchers` list holding only the preload searcher, so `require`
//! never searches a path and never loads a C module. Binary chunks are
//! refused by the metered VM itself in sandbox mode (its `ldo.c` hunk), at
//! the one place every chunk passes, whatever the mode argument says.
//!
//! With [`LUA_OS_GRANT`] the sandbox adds `os` (`os::install`: Lua's
//! clock and date functions, the worker's `getenv` and `exit`); with
//! [`LUA_IO_GRANT`] it adds `io` and `print` (`io::install`) over the
//! request's standard streams, never the worker's own (DESIGN §15.3).
//!
//! # Where each guest-visible surface is built, and which test checks it
//!
//! *Built in* names this module's items, a patch of
//! `reference-worker/metered-lua/patches/` (the VM's sandbox mode, switched
//! on by [`Meter::attach`]) or another module of the crate. *Tests* are
//! functions of `reference-worker/tests/FILE.rs`, written `FILE::test`, or
//! unit tests, written with their module path.
//!
//! | surface (SPEC) | built in | tests |
//! |---|---|---|
//! | the reachable globals, [`GLOBALS`]; everything else removed (§15.3) | [`build_observed_with`], `keep_only` | `sandbox::reachable_globals_are_exactly_the_documented_list`, `sandbox::every_removed_global_is_absent` |
//! | the library tables: `string` without `dump`, `table`, `math`, `utf8`, `coroutine` (§15.3) | [`build_observed_with`] (the libraries opened, `string.dump` removed) | `sandbox::library_tables_hold_only_the_documented_functions`, `library_results::guests_see_luas_own_library_results`, `library_errors::guests_see_luas_own_library_errors`, `real_programs::real_program_shapes_compute_what_lua_computes` |
//! | Lua patterns as Lua's (§15.4) | `lstrlib.c.patch` (charged, otherwise stock) | `pattern_differential::every_construct_matches_c_lua`, `pattern_fuzz_replay::committed_pattern_fuzz_inputs_agree_with_c_lua`, `sandbox::patterns_run_in_the_budgeted_engine_and_literal_find_works` |
//! | text chunks only, never bytecode (§15.3) | `ldo.c.patch` (`f_parser` in sandbox mode); `crate::vm` compiles in text mode | `sandbox::bytecode_is_never_loaded`, `sandbox::guest_sources_are_loaded_as_text_only`, `lua_load::real_bytecode_is_refused_whatever_the_mode` |
//! | the shared string metatable: `getmetatable("")` is `false` (§15.3) | [`build_observed_with`] | `sandbox::the_string_metatable_cannot_be_reached` |
//! | `__gc` accepted and inert: no object is ever marked for finalization (§15.5) | `lbaselib.c.patch` (`luaB_setmetatable`) | `sandbox::guest_finalizers_never_run`, `collector::a_class_library_copying_gc_into_instance_metatables_works`, `collector::a_gc_field_never_makes_a_finalizer_whatever_its_history` |
//! | `collectgarbage`: every option, tuning parameters clamped, collections charged (§15.3, §15.6) | `lbaselib.c.patch` (`luaB_collectgarbage`) | `sandbox::collectgarbage_switches_work_and_collections_are_charged`, `collector::stop_restart_and_isrunning_behave_as_in_stock_lua`, `collector::out_of_range_parameters_are_clamped_not_refused`, `collector::a_memory_bomb_under_a_stopped_collector_still_trips_the_memory_limit`, `collector::extreme_collector_parameters_cannot_raise_cpu_per_unit_past_the_bound` |
//! | no heap addresses: `tostring`, `%p`, `math.randomseed`, `next` order (§15.3) | `lauxlib.c.patch` (`luaL_tolstring`), `lstrlib.c.patch` (`%p`), `lmathlib.c.patch`, `ltable.c.patch` (keyed hashes) | `budgets::tostring_shows_no_addresses_and_stays_unique`, `budgets::format_shows_no_addresses`, `budgets::error_records_show_no_addresses`, `format_pointer::percent_p_prints_numbers_where_lua_prints_addresses`, `format_pointer::live_strings_keep_distinct_numbers_that_are_not_their_addresses`, `audit_paths::math_randomseed_returns_neither_an_address_nor_the_clock`, `audit_paths::next_order_over_tables_and_functions_tells_nothing_of_their_addresses` |
//! | the `lua.load` grant: `load`, `require`, a pruned `package` (§15.3) | [`LUA_LOAD_GRANT`], [`SandboxOptions`], `prune_package` | `lua_load::the_grant_adds_exactly_load_require_and_a_pruned_package`, `lua_load::require_names_only_the_preload_table_when_a_module_is_missing`, `lua_load::load_and_require_behave_as_in_stock_lua`, `lua_load::without_the_grant_nothing_changes` |
//! | the `lua.os` grant: `os` with `clock`, `date`, `difftime`, `exit`, `getenv`, `time` (§15.3) | [`capabilities`], [`os`] (`loslib.c` for the clock and dates, the worker's `getenv` and `exit`), `loslib.c.patch` (charges) | `lua_os::os_date_matches_stock_lua_for_every_conversion_specifier_local_and_utc`, `lua_os::os_time_round_trips_with_tables_as_in_stock_lua`, `lua_os::os_getenv_sees_only_the_declared_environment`, `lua_os::os_exit_ends_the_script_with_its_status_through_the_runner_abi`, `lua_os::the_grant_adds_exactly_os_and_its_six_functions`, `lua_os::without_the_grant_there_is_no_os`, `lua_os::the_worker_binary_answers_dates_times_and_clocks_under_its_lockdown` |
//! | the `lua.io` grant: `io` and `print` over the request's streams (§15.3) | [`capabilities`], [`io`], [`process_view`] | `lua_io::io_write_mixed_with_print_keeps_program_order`, `lua_io::io_read_formats_read_stdin_as_stock_lua_reads_it`, `lua_io::lines_iterate_stdin_as_stock_lua_does`, `lua_io::library_errors_are_lua_s_own`, `lua_io::files_and_processes_are_refused_with_nil_and_a_message`, `lua_io::the_grant_adds_exactly_io_and_print`, `lua_io::without_the_grant_there_is_no_io_and_no_print` |
//! | the `quirl` table and its registrations (§15.9) | [`sdk::install`] | `serve::load_plugin_returns_the_registrations`, `serve::plugin_callbacks_answer_their_operations`, `serve::load_config_returns_the_validated_configuration` |
//! | the grant each registration and extension capability needs (§15.9) | [`grants::Capabilities::require`], [`grants::capability_grant`], [`grants::contribution_grant`], [`grants::default_grants`] | `sandbox::grants::tests::grants_cover_every_capability_and_kind`, `sandbox::grants::tests::a_missing_grant_is_denied_by_name` |
//! | `quirl.process.run`: its grants, then a host call to the parent (§15.9) | `sdk` (`process_run`, [`sdk::HostPort`]), [`grants::process_granted`] | `serve::process_run_checks_its_capability_before_any_host_call`, `serve::process_run_sends_a_host_call_and_returns_the_outcome`, `serve::process_run_reports_nonzero_status_and_host_errors_to_the_guest`, `sandbox::grants::tests::scoped_process_grants_allow_one_simple_program` |

pub mod capabilities;
pub mod grants;
pub mod io;
pub mod os;
pub mod process_view;
pub mod sdk;

pub use capabilities::{
    LUA_IO_GRANT, LUA_LOAD_GRANT, LUA_OS_GRANT, PACKAGE_MEMBERS, SANDBOX_CAPABILITIES,
    SandboxCapability, SandboxOptions,
};
pub use process_view::ProcessView;

use crate::budget::Meter;
use mlua::{Lua, LuaOptions, LuaString, StdLib, Value};
use std::sync::Arc;

/// Every global a guest can reach without a sandbox capability, with the
/// SDK table `quirl` (the capabilities add theirs:
/// [`SandboxOptions::globals`]).
pub const GLOBALS: &[&str] = &[
    "_G",
    "_VERSION",
    "assert",
    "collectgarbage",
    "coroutine",
    "error",
    "getmetatable",
    "ipairs",
    "math",
    "next",
    "pairs",
    "pcall",
    "quirl",
    "rawequal",
    "rawget",
    "rawlen",
    "rawset",
    "select",
    "setmetatable",
    "string",
    "table",
    "tonumber",
    "tostring",
    "type",
    "utf8",
    "xpcall",
];

/// The globals [`LUA_LOAD_GRANT`] adds to [`GLOBALS`].
pub const LUA_LOAD_GLOBALS: &[&str] = &["load", "package", "require"];

/// A freshly built sandbox.
pub struct Sandbox {
    /// The VM.
    pub lua: Lua,
    /// The process the guest sees (its standard streams, environment and
    /// exit status; used by `lua.io` and `lua.os`).
    pub process: Arc<ProcessView>,
}

/// The steps of [`build`], in order, as [`build_observed`] reports them
/// (the cold-start bench times each one: BENCHMARKS.md, "Cold start
/// breakdown").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildStep {
    /// `lua_newstate` and the five standard libraries opened.
    LuaState,
    /// The shared string metatable protected and `string.dump` removed.
    StringMetatable,
    /// The globals pruned to [`GLOBALS`].
    Globals,
}

/// Build the restricted VM with the default globals. No guest code has run
/// when this returns.
pub fn build(meter: &Arc<Meter>) -> mlua::Result<Sandbox> {
    build_with(meter, SandboxOptions::default())
}

/// Build the restricted VM with `options`. No guest code has run when this
/// returns.
pub fn build_with(meter: &Arc<Meter>, options: SandboxOptions) -> mlua::Result<Sandbox> {
    build_observed_with(meter, options, &mut |_| {})
}

/// [`build`], calling `observe` after each [`BuildStep`] (for timing; it
/// gets no access to the VM).
pub fn build_observed(
    meter: &Arc<Meter>,
    observe: &mut dyn FnMut(BuildStep),
) -> mlua::Result<Sandbox> {
    build_observed_with(meter, SandboxOptions::default(), observe)
}

/// [`build_with`], calling `observe` after each [`BuildStep`].
pub fn build_observed_with(
    _meter: &Arc<Meter>,
    options: SandboxOptions,
    observe: &mut dyn FnMut(BuildStep),
) -> mlua::Result<Sandbox> {
    let mut libs = StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8 | StdLib::COROUTINE;
    if options.lua_load {
        libs |= StdLib::PACKAGE;
    }
    if options.lua_os {
        libs |= StdLib::OS;
    }
    let lua = Lua::new_with(libs, LuaOptions::new())?;
    lua.remove_warning_function();
    observe(BuildStep::LuaState);

    // The string metatable is shared by every string; `__metatable` makes
    // getmetatable("") return `false` instead of the real table.
    let strings = lua
        .type_metatable::<LuaString>()
        .ok_or_else(|| mlua::Error::runtime("the string library set no string metatable"))?;
    strings.raw_set("__metatable", false)?;
    let string: mlua::Table = lua.globals().raw_get("string")?;
    string.raw_set("dump", Value::Nil)?;
    observe(BuildStep::StringMetatable);

    let process = Arc::new(ProcessView::default());
    if options.lua_os {
        os::install(&lua, &process)?;
    }
    if options.lua_io {
        io::install(&lua, &process)?;
    }
    let globals = lua.globals();
    if options.lua_load {
        prune_package(&globals)?;
    }
    keep_only(&globals, &options.globals())?;
    observe(BuildStep::Globals);
    Ok(Sandbox { lua, process })
}

/// Remove every string key of `table` not in `kept` (and every other key).
pub(crate) fn keep_only(table: &mlua::Table, kept: &[&str]) -> mlua::Result<()> {
    let mut remove = Vec::new();
    for pair in table.pairs::<Value, Value>() {
        let (key, _) = pair?;
        let keep = matches!(&key, Value::String(name) if kept.contains(&&*name.to_string_lossy()));
        if !keep {
            remove.push(key);
        }
    }
    for key in remove {
        table.raw_set(key, Value::Nil)?;
    }
    Ok(())
}

/// `package` as [`LUA_LOAD_GRANT`] leaves it: [`PACKAGE_MEMBERS`] only,
/// and `searchers` holding only Lua's preload searcher (the first entry
/// `luaopen_package` creates), so that `require` finds a module in
/// `package.loaded` or `package.preload` or fails with Lua's own message
/// `module 'NAME' not found:\n\tno field package.preload['NAME']`.
fn prune_package(globals: &mlua::Table) -> mlua::Result<()> {
    let package: mlua::Table = globals.raw_get("package")?;
    keep_only(&package, PACKAGE_MEMBERS)?;
    let searchers: mlua::Table = package.raw_get("searchers")?;
    let preload: Value = searchers.raw_get(1)?;
    if !matches!(preload, Value::Function(_)) {
        return Err(mlua::Error::runtime(
            "package.searchers has no preload searcher",
        ));
    }
    let fresh = searchers.raw_len();
    for index in (2..=fresh.max(4)).rev() {
        searchers.raw_set(index, Value::Nil)?;
    }
    Ok(())
}
