#!/usr/bin/env bash
# What a budget unit costs, idiom by idiom (BENCHMARKS.md, "What a unit
# costs"): each program's CPU time under stock Lua 5.4.9 (its own
# os.clock, printed to stderr) and the units the metered VM charges it
# (the lua_test_suite example, meter attached, the worker's limits).
# A low ns/unit means the budget charges more than the work costs.
#   bash bench/lua/idioms/units.sh        (from the repository root)
set -euo pipefail
cargo build -q --release --example lua_test_suite -p quirl-lua-reference-worker
cargo build -q --release -p quirl-lua-metered-vm --features stock-baseline
host=$(rustc -vV | sed -n 's/^host: //p')
stock=$(ls -t "target/$host/release/build/"quirl-lua-metered-vm-*/out/stock-lua | head -1)
runner="target/$host/release/examples/lua_test_suite"
dir=bench/lua/idioms
echo "| idiom | stock Lua CPU | units | ns per unit |"
echo "| ----- | ------------: | ----: | ----------: |"
for file in "$dir"/*.lua; do
  name=$(basename "$file" .lua)
  ms=$("$stock" "$file" 2>&1 >/dev/null | awk '/^CPU/ {printf "%.2f", $2 * 1000}')
  out=$("$runner" "$dir" "$name" 2>&1 || true)
  units=$(grep -o '([0-9]* units)' <<<"$out" | tr -dc 0-9 || true)
  if [ -z "$units" ]; then
    echo "| $name | $ms ms | stopped by the budget | |"
  else
    echo "| $name | $ms ms | $units | $(awk -v ms="$ms" -v u="$units" 'BEGIN {printf "%.1f", ms * 1e6 / u}') |"
  fi
done
