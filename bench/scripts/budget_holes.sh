#!/usr/bin/env bash
# Native paths that once ran far longer than their instruction budget
# (BENCHMARKS.md, B3; DESIGN §15.6). For each quirl-lua binary given, every
# case runs once with the budget shown and a 10 s wall clock; the table gives
# the wall time and how the request ended. A bounded case ends by
# `instructions` within a fraction of a second; an unbounded one runs until
# the wall clock (`wall_time`/`deadline`).
# Usage: bench/scripts/budget_holes.sh QUIRL_LUA [QUIRL_LUA ...]
set -euo pipefail
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
python3 - "$scratch/big_function.lua" <<'PY'
import sys
dead = " ".join("a = %d" % i for i in range(60000))
open(sys.argv[1], "w").write(
    "local function f() local a if false then " + dead +
    " end local t = {} return t.a.b end for i = 1, 1e9 do pcall(f) end")
PY
cases=(
  "format %.1s over 16 MiB|2000000|32MiB|local big = 'a' for i = 1, 24 do big = big .. big end while true do local x = string.format('%.1s', big) end"
  "unpack z over 16 MiB|2000000|32MiB|local big = 'a' for i = 1, 24 do big = big .. big end while true do pcall(string.unpack, 'z', big) end"
  "error level walk, depth 150,000|5000000|64MiB|local function deep(n) if n == 0 then while true do pcall(error, 'x', 1e9) end end return 1 + deep(n - 1) end return deep(150000)"
  "rehash churn next to 10^6 slots|10000000|64MiB|local t = {} for i = 1, 1e6 do t[i] = true end t.a = true t.b = true local k = 0 while true do k = k + 1 t[k + 0.5] = true t[k + 0.5] = nil end"
  "__index chain of 1,990 tables|2000000|32MiB|local t = {} for i = 1, 1990 do t = setmetatable({}, {__index = t}) end while true do local v = t.missing end"
  "__newindex chain of 1,990 tables|2000000|32MiB|local t = {} for i = 1, 1990 do t = setmetatable({}, {__newindex = t}) end while true do t.x = nil end"
  "select('#', ...) of 200,000 values|5000000|32MiB|local t = {} for i = 1, 200000 do t[i] = i end local function f(...) while true do local n = select('#', ...) end end return f(table.unpack(t))"
  "errors in a 60,000-instruction function|2000000|32MiB|@$scratch/big_function.lua"
)
printf '| case | budget |'
for binary in "$@"; do printf ' %s |' "$(basename "$(dirname "$binary")")/$(basename "$binary")"; done
printf '\n|---|---:|'
for _ in "$@"; do printf -- '---|'; done
printf '\n'
for case in "${cases[@]}"; do
  IFS='|' read -r name budget memory source <<<"$case"
  printf '| %s | %s |' "$name" "$budget"
  for binary in "$@"; do
    start=$(date +%s%N)
    if [[ $source == @* ]]; then
      output=$("$binary" --instructions "$budget" --memory "$memory" --wall-time-ms 10000 run "${source#@}" 2>&1 || true)
    else
      output=$("$binary" --instructions "$budget" --memory "$memory" --wall-time-ms 10000 eval "$source" 2>&1 || true)
    fi
    elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
    ended=$(grep -oE 'limit: (instructions|memory|wall_time)|exceeded its deadline' <<<"$output" | head -1 || true)
    printf ' %d ms (%s) |' "$elapsed" "${ended:-?}"
  done
  printf '\n'
done
