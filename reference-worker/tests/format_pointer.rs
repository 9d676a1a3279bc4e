//! `string.format`'s `%p` against stock Lua 5.4.9 (DESIGN §15.3 "No heap
//! addresses"): the same conversion specifications accepted and refused,
//! with Lua's messages; the same `(null)` for values that are not objects;
//! the same widths and alignment. Where stock Lua prints an address the
//! sandbox prints `#<n>`, so those results are compared by their shape.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

/// Each case's result as one line: Lua's error message, the exact text
/// when it holds no object (`(null)`), else its shape: `P` for the
/// object, `right`/`left` for padding on that side (widths of 20 and
/// more), and the length when it is not the width asked for (or the
/// object's own when wider).
const SHAPES: &str = r##"
local function shape(s, width)
  local lead, core, trail = s:match('^( *)(.-)( *)$')
  if not (core:match('^0x%x+$') or core:match('^#%d+$')) then return 'exact ' .. s end
  local out = 'P'
  -- An address is up to 18 bytes, so only a width of 20 or more pads
  -- both; below that only the length is compared.
  if width >= 20 and #lead > 0 then out = out .. ' right' end
  if width >= 20 and #trail > 0 then out = out .. ' left' end
  if #s ~= math.max(width, #core) then out = out .. ' width ' .. #s end
  return out
end
local long = ('long string '):rep(10)
local values = {
  {'table', {}}, {'function', pcall}, {'closure', function() end},
  {'thread', coroutine.create(pcall)}, {'short string', 'x'}, {'long string', long},
  {'integer', 1}, {'float', 1.5}, {'boolean', true}, {'nil', nil},
}
local specs = {
  '%p', '%1p', '%10p', '%-10p', '%20p', '%-20p', '%--20p', '%99p', '%-99p',
  '%100p', '%010p', '%+p', '% p', '%#p', '%.3p', '%5.2p', '%.p', '%0p', '%-0p',
  '%' .. ('-'):rep(40) .. 'p', '%lp', '%hp',
}
local out = {}
for _, spec in ipairs(specs) do
  for _, case in ipairs(values) do
    local ok, s = pcall(string.format, spec .. '|', case[2])
    local width = tonumber(spec:match('(%d+)p$')) or 0
    out[#out + 1] = spec .. ' ' .. case[1] .. ': ' ..
      (ok and shape(s:sub(1, -2), width) or ('error ' .. s))
  end
end
out[#out + 1] = 'missing: ' .. select(2, pcall(string.format, '%p'))
out[#out + 1] = 'same table: ' .. tostring(string.format('%p', values[1][2]) == string.format('%p', values[1][2]))
out[#out + 1] = 'two tables: ' .. tostring(string.format('%p', {}) ~= string.format('%p', values[1][2]))
out[#out + 1] = 'same short string: ' .. tostring(string.format('%p', 'x') == string.format('%p', 'x'))
-- Strings are told apart as Lua tells them apart: a long string is its own
-- object, whatever its text (Lua's own pm.lua relies on it).
local long2 = ('long string '):rep(10)
out[#out + 1] = 'same long string: ' .. tostring(string.format('%p', long) == string.format('%p', long))
out[#out + 1] = 'two long strings, one text: ' .. tostring(long == long2 and string.format('%p', long) ~= string.format('%p', long2))
out[#out + 1] = 'short and long: ' .. tostring(string.format('%p', 'x') ~= string.format('%p', long))
out[#out + 1] = 'in text: ' .. shape(string.format('[%p]', values[1][2]):sub(2, -2), 0)
return table.concat(out, '\n')
"##;

#[test]
fn percent_p_accepts_refuses_and_pads_as_stock_lua_does() {
    let expected = quirl_lua_testkit::stock::run(SHAPES, "=eval").unwrap();
    let actual = success(eval(&mut vm(), SHAPES));
    let actual = actual.as_str().unwrap();
    let mismatches: Vec<String> = expected
        .lines()
        .zip(actual.lines())
        .filter(|(lua, sandbox)| lua != sandbox)
        .map(|(lua, sandbox)| format!("  lua:     {lua}\n  sandbox: {sandbox}"))
        .collect();
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert_eq!(expected.lines().count(), actual.lines().count());
    // The comparison covers refusals and objects alike.
    assert!(
        expected.contains("%010p table: error invalid conversion specification: '%010p'"),
        "{expected}"
    );
    assert!(expected.contains("%-20p table: P left"), "{expected}");
    assert!(
        expected.contains("%10p nil: exact     (null)"),
        "{expected}"
    );
}

#[test]
fn percent_p_prints_numbers_where_lua_prints_addresses() {
    // DESIGN §15.3-a: `%p` shows a number, never an address.
    let text = success(eval(
        &mut vm(),
        "local t = {} return string.format('%p %p %5p|%-5p|', t, 'x', t, t)",
    ));
    let text = text.as_str().unwrap();
    let parts: Vec<&str> = text.splitn(3, ' ').collect();
    assert!(parts[0].starts_with('#'), "{text}");
    assert!(parts[0][1..].bytes().all(|b| b.is_ascii_digit()), "{text}");
    assert_ne!(parts[0], parts[1], "{text}");
    assert_eq!(
        json!(parts[2]),
        json!(format!("{:>5}|{:<5}|", parts[0], parts[0]))
    );
}

#[test]
fn live_strings_keep_distinct_numbers_that_are_not_their_addresses() {
    // DESIGN §15.3-a: a string's `%p` is its address under a keyed
    // permutation: 10,000 live long strings of one text give 10,000
    // numbers, each the same every time it is shown; strings allocated
    // one after another (addresses ~100 bytes apart) do not show numbers
    // close together, as their addresses would be; and showing them keeps
    // nothing alive (a collection frees what the strings held).
    let source = "
        local text = ('x'):rep(64)
        local strings, seen, distinct, close, last = {}, {}, 0, 0, nil
        for i = 1, 10000 do strings[i] = text:sub(1) end
        for i = 1, 10000 do
          local p = string.format('%p', strings[i])
          assert(p == string.format('%p', strings[i]), 'stable')
          assert(p:match('^#%d+$'), p)
          if not seen[p] then seen[p], distinct = true, distinct + 1 end
          local n = math.tointeger(tonumber(p:sub(2)))
          if last and math.abs(n - last) < 1 << 20 then close = close + 1 end
          last = n
        end
        assert(close < 100, 'numbers follow the allocation order: ' .. close)
        local shown = collectgarbage('count')
        strings, seen = nil, nil
        collectgarbage()
        return {distinct, shown - collectgarbage('count') > 500}";
    assert_eq!(success(eval(&mut vm(), source)), json!([10000, true]));
}
