//! The paths the metered VM was built for (DESIGN §15.6 audit table): work
//! that stock Lua does inside one instruction, data-dependent and without
//! bound, now ends by the instruction budget — or no longer exists — and
//! nothing the guest sees is derived from an address (DESIGN §15.3).
//!
//! Each verdict is judged from the error record (`limit: instructions`),
//! never from timing: the wall-clock budget is far above what the
//! instruction budget allows, so a path the budget does not bound shows up
//! as a `wall_time` trip (or, for the hash rows, as a run that reaches the
//! wall clock instead of completing). The CPU each path costs per budget
//! unit is measured by the bench (BENCHMARKS.md, B1 and the audit rows).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use quirl_lua_reference_worker::Verdict;
use serde_json::json;

/// A million units, a minute of wall clock.
const MILLION: Budgets = Budgets {
    allow_process: false,
    memory_limit_bytes: 64 * 1024 * 1024,
    instruction_limit: 1_000_000,
    wall_time_ms: 60_000,
};

#[track_caller]
fn assert_ends_by_the_budget(sources: &[&str]) {
    for source in sources {
        let limit = tripped(eval(&mut vm_with(MILLION), source));
        assert_eq!(limit, "instructions", "{source}");
    }
}

#[test]
fn comparisons_of_strings_of_unequal_lengths_are_charged_by_the_bytes_compared() {
    // DESIGN §15.6-b: an audit path ends by the budget.
    // `l_strcmp` compares the common prefix (segment by segment, `\0`
    // included) before the lengths decide: a megabyte per comparison.
    assert_ends_by_the_budget(&[
        "local a = string.rep('x', 1 << 20) local b = a .. 'y' local c = 0
         for i = 1, 1e7 do if a < b then c = c + 1 end end return c",
        "local a = string.rep('x', 1 << 20) local b = a .. 'y' local c = 0
         for i = 1, 1e7 do if b <= a then c = c + 1 end end return c",
        "local a = string.rep('x\\0', 1 << 19) local b = a .. '\\0' local c = 0
         for i = 1, 1e7 do if a < b then c = c + 1 end end return c",
        "local a = string.rep('x', 1 << 20) local t = {a .. 'b', a, a .. 'a', a .. 'c'}
         for i = 1, 1e7 do table.sort(t) t[1], t[4] = t[4], t[1] end",
    ]);
}

#[test]
fn a_call_metamethod_that_leads_back_to_itself_ends_by_the_budget() {
    // DESIGN §15.6-b: an audit path ends by the budget.
    // Each step of the `__call` chain inserts the callee and resolves again,
    // inside one call instruction.
    assert_ends_by_the_budget(&[
        "local mt = {} local t = setmetatable({}, mt) mt.__call = t return t()",
        "local a, b = setmetatable({}, {}), setmetatable({}, {})
         getmetatable(a).__call = b getmetatable(b).__call = a
         for i = 1, 1e7 do pcall(a) end",
        "local mt = {} local t = setmetatable({}, mt) mt.__call = t
         for i = 1, 1e7 do pcall(t, 1, 2, 3) end",
    ]);
}

#[test]
fn long_elseif_chains_are_charged_while_they_compile() {
    // DESIGN §15.6-b: an audit path ends by the budget.
    // 60,000 branches, ~2 MB of source: the compiler's work on each branch
    // (jump lists patched per branch) is charged before anything runs.
    let mut source = String::from("local x = 0 if x == 0 then x = 1\n");
    for branch in 1..60_000 {
        source.push_str(&format!("elseif x == {branch} then x = {}\n", branch + 1));
    }
    source.push_str("end return x\n");
    assert_ends_by_the_budget(&[&source]);
    // The same construct, small, compiles and runs.
    let mut small = String::from("local x = 3 if x == 0 then x = 1\n");
    for branch in 1..100 {
        small.push_str(&format!("elseif x == {branch} then x = {}\n", branch * 10));
    }
    small.push_str("end return x\n");
    assert_eq!(success(eval(&mut vm_with(MILLION), &small)), json!(30));
}

#[test]
fn long_set_classes_are_charged_for_each_scan() {
    // DESIGN §15.6-b: an audit path ends by the budget.
    // Each matcher step against a 4 KB set scans the set.
    assert_ends_by_the_budget(&[
        "local s = string.rep('a', 100000) local set = '[' .. string.rep('b', 4000) .. 'a]'
         local c = 0 for i = 1, 1e6 do c = c + #s:match(set .. '+') end return c",
        "local s = string.rep('a', 100000) local set = '[^' .. string.rep('b', 4000) .. ']'
         local c = 0 for i = 1, 1e6 do for _ in s:gmatch(set) do c = c + 1 end end return c",
        "local s = string.rep('a', 100000) local set = '[' .. string.rep('b', 4000) .. 'a]'
         for i = 1, 1e6 do s:gsub(set, 'a') end",
        "local s = string.rep('a', 100000) local set = '[' .. string.rep('b', 4000) .. ']'
         for i = 1, 1e6 do s:find(set) end",
    ]);
}

#[test]
fn number_keys_that_share_lua_s_own_hash_do_not_share_a_chain() {
    // Stock Lua hashes a float by 31 bits of its mantissa (so 1 + i * 2^-45
    // are all one chain) and an integer modulo an odd number (so multiples
    // of it are one chain): 200,000 such keys would walk chains of
    // 200,000 nodes for minutes inside single instructions. Keyed and
    // hashed by all their bits, they cost what ordinary keys cost and the
    // runs complete within a budget sized for ordinary keys.
    let budget = Budgets {
        instruction_limit: 30_000_000,
        ..MILLION
    };
    for (keys, expected) in [
        ("1 + i * 2^-45", 200_000),
        ("i * 1048575", 200_000),
        ("i * 2^40", 200_000),
        ("-i - 0.5", 200_000),
    ] {
        let source = format!(
            "local t, n = {{}}, 200000
             for i = 1, n do t[{keys}] = i end
             local found = 0
             for i = 1, n do if t[{keys}] == i then found = found + 1 end end
             return found"
        );
        assert_eq!(
            success(eval(&mut vm_with(budget), &source)),
            json!(expected),
            "{keys}"
        );
    }
}

/// The address ranges mapped into this process (the VM runs in it).
fn mappings() -> Vec<(u64, u64)> {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter_map(|line| {
            let range = line.split_whitespace().next()?;
            let (from, to) = range.split_once('-')?;
            Some((
                u64::from_str_radix(from, 16).ok()?,
                u64::from_str_radix(to, 16).ok()?,
            ))
        })
        .collect()
}

#[test]
fn math_randomseed_returns_neither_an_address_nor_the_clock() {
    // DESIGN §15.3-a: no address from `math.randomseed()`.
    // Stock Lua seeds with `time(NULL)` and the address of the state, and
    // `math.randomseed()` returns both.
    let values = success(eval(
        &mut vm(),
        "local out = {}
         for i = 1, 32 do local a, b = math.randomseed() out[#out + 1] = a out[#out + 1] = b end
         return out",
    ));
    let values: Vec<u64> = values
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap() as u64)
        .collect();
    assert_eq!(values.len(), 64);
    let maps = mappings();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for value in &values {
        assert!(
            !maps.iter().any(|(from, to)| (*from..*to).contains(value)),
            "{value:#x} lies in a mapping of this process"
        );
        assert!(value.abs_diff(now) > 10_000_000, "{value} is the clock");
    }
    // An address is aligned; 64 random values all multiples of 8 is 2^-192.
    assert!(values.iter().any(|v| v % 8 != 0), "{values:x?}");
    // A seed set by the guest still gives the same sequence, as in Lua.
    assert_eq!(
        success(eval(
            &mut vm(),
            "math.randomseed(42) local a = math.random(1 << 30)
             math.randomseed(42) return a == math.random(1 << 30)"
        )),
        json!(true)
    );
}

/// Spearman's rank correlation of two equally long sequences of distinct
/// values.
fn rank_correlation(xs: &[f64], ys: &[f64]) -> f64 {
    fn ranks(values: &[f64]) -> Vec<f64> {
        let mut order: Vec<usize> = (0..values.len()).collect();
        order.sort_by(|a, b| values[*a].total_cmp(&values[*b]));
        let mut ranks = vec![0.0; values.len()];
        for (rank, index) in order.into_iter().enumerate() {
            ranks[index] = rank as f64;
        }
        ranks
    }
    let (rx, ry) = (ranks(xs), ranks(ys));
    let n = xs.len() as f64;
    let mean = (n - 1.0) / 2.0;
    let (mut cov, mut vx, mut vy) = (0.0, 0.0, 0.0);
    for (x, y) in rx.iter().zip(&ry) {
        cov += (x - mean) * (y - mean);
        vx += (x - mean) * (x - mean);
        vy += (y - mean) * (y - mean);
    }
    cov / (vx * vy).sqrt()
}

#[test]
fn next_order_over_tables_and_functions_tells_nothing_of_their_addresses() {
    // DESIGN §15.3-a: no address from the order of `next`.
    // The VM is ours (this crate links it to mlua); a plain state shows
    // the table layout the sandbox's states have. Stock Lua puts a pointer
    // key at `address mod (size - 1 | 1)`, so the order of `next` follows
    // the addresses: the rank correlation is near 1 there, near 0 when the
    // hash is keyed.
    let lua = mlua::Lua::new();
    for maker in ["{}", "function() end"] {
        let (keys, order): (mlua::Table, mlua::Table) = lua
            .load(format!(
                "local keys, set = {{}}, {{}}
                 for i = 1, 1000 do local k = {maker} keys[i] = k set[k] = i end
                 local order = {{}}
                 for _, i in next, set do order[#order + 1] = i end
                 return keys, order"
            ))
            .eval()
            .unwrap();
        let mut positions = Vec::new();
        let mut stock_slots = Vec::new();
        for (position, index) in order.sequence_values::<i64>().enumerate() {
            let key: mlua::Value = keys.get(index.unwrap()).unwrap();
            let address = key.to_pointer() as u64;
            positions.push(position as f64);
            // Stock: `point2uint` keeps the low 32 bits; 1024 nodes.
            stock_slots.push(((address & 0xffff_ffff) % 1023) as f64 + position as f64 * 1e-6);
        }
        assert_eq!(positions.len(), 1000);
        let rho = rank_correlation(&positions, &stock_slots);
        assert!(
            rho.abs() < 0.2,
            "{maker}: next order follows the addresses (rank correlation {rho:.3})"
        );
    }
}

/// `(bytes in use, bytes requested)` of a memory trip's context
/// (`observed: U bytes in use, R more requested; …`).
#[track_caller]
fn memory_observed(verdict: Verdict) -> (u64, u64) {
    let error = retired(verdict);
    let observed = error
        .context
        .iter()
        .find_map(|c| c.strip_prefix("observed: "))
        .unwrap_or_else(|| panic!("no observation in {error:?}"));
    let numbers: Vec<u64> = observed
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|part| part.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

// DESIGN §15.6: a `luaL_Buffer` box (the buffer of `table.concat`, `gsub`,
// `string.format`, `tostring`…) is allocated by lauxlib.c outside Lua's
// own count. It is held to the memory limit like every other allocation:
// building a 64 MiB result under an 8 MiB limit ends while the box grows,
// with the box counted as in use (before, the box grew to 64 MiB and only
// the final string was refused).
#[test]
fn buffer_boxes_count_against_the_memory_limit() {
    // DESIGN §15.6-d: `luaL_Buffer` boxes count against the memory limit.
    const LIMIT: u64 = 8 * 1024 * 1024;
    let budgets = Budgets {
        allow_process: false,
        memory_limit_bytes: LIMIT,
        instruction_limit: 100_000_000,
        wall_time_ms: 60_000,
    };
    for source in [
        "local s = string.rep('x', 1 << 20) local t = {} \
         for i = 1, 64 do t[i] = s end return #table.concat(t)",
        "local s = string.rep('x', 1 << 20) \
         return #s:gsub('x', string.rep('y', 64))",
        "local s = string.rep('x', 1 << 20) local t = {} \
         for i = 1, 64 do t[i] = s end return #string.format(string.rep('%s', 64), table.unpack(t))",
    ] {
        let mut vm = vm_with(budgets);
        let verdict = eval(&mut vm, source);
        let limit = match &verdict {
            Verdict::Retired(error) => error
                .context
                .iter()
                .find_map(|c| c.strip_prefix("limit: ").map(str::to_owned)),
            other => panic!("expected a memory trip, got {other:?}\n{source}"),
        };
        assert_eq!(limit.as_deref(), Some("memory"), "{source}");
        let (used, requested) = memory_observed(verdict);
        assert!(
            used <= LIMIT,
            "{used} bytes in use over the limit: {source}"
        );
        assert!(
            requested <= 2 * LIMIT,
            "{requested} bytes requested at once: the box grew unchecked: {source}"
        );
    }
}
