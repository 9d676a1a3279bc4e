#!/usr/bin/env python3
"""Re-derive Quirl 0.1's expected-failures list from a Quirl binary, and check it.

    QUIRL_BIN=/path/to/quirl python3 conformance/expected/rederive.py [--runs N] [--write]
        [--runner PATH] [--list FILE]

Runs the worker suite against `$QUIRL_BIN --internal-lua-worker-v1` N times
(default 3) without any expected-failures list (`quirl-conformance worker
--json`), and compares the cases Quirl fails with `quirl-0.1.txt` beside this
script (SPEC.md §19.4):

- a case that fails in every run must be listed (else: "new failure");
- a listed case must fail in every run (else: "stale", it passes now);
- a case that fails in some runs only is "flaky": it can be neither listed
  (a run where it passes would fail the certification) nor left out, so it
  is reported for the case (or Quirl) to be looked at.

Exit status 0 when the list is exactly the derived one. With `--write` the
list is rewritten: stale entries are dropped, and new failures are appended
with the reason key their profile suggests and a `TODO` reason, which
`conformance/tests/quirl_interop.rs` refuses until a real reason (an
erratum of SPEC.md §14, or `reference-sandbox:`) replaces it. Run it
whenever a case, a fixture or the runner changes; Quirl 0.1 itself is
upstream commit 38ce736 (build: see conformance/README.md, "Quirl 0.1,
certified").

The runner is `cargo run -p quirl-lua-conformance --bin quirl-conformance`
unless `--runner` names a built `quirl-conformance`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LIST = HERE / "quirl-0.1.txt"
NAME = re.compile(r"^([A-Za-z0-9_.\-]+)\s*(?:#\s*(.*))?$")


def runner_command(runner: str | None) -> list[str]:
    if runner:
        return [runner]
    return ["cargo", "run", "--quiet", "-p", "quirl-lua-conformance",
            "--bin", "quirl-conformance", "--"]


def listed(path: Path) -> dict[str, str]:
    """Case name -> reason, for every entry of the list."""
    entries = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = NAME.match(line)
        if not match:
            sys.exit(f"{path}: not a case line: {line}")
        entries[match.group(1)] = match.group(2) or ""
    return entries


def profiles(runner: list[str], quirl: str) -> dict[str, str]:
    out = subprocess.run(
        runner + ["worker", "--list", "--", quirl, "--internal-lua-worker-v1"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    return {fields[0]: fields[2] for fields in (line.split("\t") for line in out.splitlines()) if len(fields) >= 3}


def failures(runner: list[str], quirl: str, run: int, runs: int) -> set[str]:
    print(f"run {run}/{runs}: {' '.join(runner)} worker --json -- {quirl} --internal-lua-worker-v1",
          file=sys.stderr, flush=True)
    done = subprocess.run(
        runner + ["worker", "--json", "--", quirl, "--internal-lua-worker-v1"],
        cwd=ROOT, capture_output=True, text=True,
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        sys.exit(f"no JSON report from the runner (exit {done.returncode}):\n{done.stderr[-2000:]}")
    failed = {case["name"] for case in report["cases"] if case["status"] != "pass"}
    summary = report["summary"]
    print(f"  {summary['total']} cases, {summary['passed']} passed, {len(failed)} failed "
          f"in {summary['millis'] / 1000:.1f} s", file=sys.stderr, flush=True)
    return failed


def rewrite(path: Path, stale: set[str], new: set[str], profile: dict[str, str]) -> None:
    kept = [line for line in path.read_text(encoding="utf-8").splitlines()
            if not ((match := NAME.match(line.strip())) and match.group(1) in stale)]
    width = max((len(name) for name in new), default=0)
    for name in sorted(new):
        key = "reference-sandbox: TODO" if profile.get(name) == "reference-sandbox" else "E?: TODO"
        kept.append(f"{name.ljust(max(width, 72))} # {key} say why Quirl 0.1 fails it")
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="suite runs (default 3)")
    parser.add_argument("--write", action="store_true", help="rewrite the list")
    parser.add_argument("--runner", help="a built quirl-conformance (default: cargo run)")
    parser.add_argument("--list", type=Path, default=LIST, help="the list (default quirl-0.1.txt)")
    options = parser.parse_args()
    quirl = os.environ.get("QUIRL_BIN")
    if not quirl:
        sys.exit("set QUIRL_BIN to a Quirl 0.1 binary (quirl --internal-lua-worker-v1 is its worker)")
    runner = runner_command(options.runner)
    runs = [failures(runner, quirl, run, options.runs) for run in range(1, options.runs + 1)]
    always = set.intersection(*runs)
    sometimes = set.union(*runs) - always
    entries = listed(options.list)
    stale = set(entries) - always - sometimes
    new = always - set(entries)
    flaky_listed = sometimes & set(entries)
    flaky_unlisted = sometimes - set(entries)
    for name in sorted(stale):
        print(f"stale: {name} is listed ({entries[name]}) but passed in every run")
    for name in sorted(new):
        print(f"new failure: {name} failed in every run and is not listed")
    for name in sorted(sometimes):
        count = sum(name in failed for failed in runs)
        where = "listed" if name in entries else "not listed"
        print(f"flaky: {name} ({where}) failed in {count} of {options.runs} runs")
    if options.write and (stale or new):
        rewrite(options.list, stale, new, profiles(runner, quirl))
        print(f"rewrote {options.list}: {len(stale)} dropped, {len(new)} added (give each a reason)")
    problems = len(stale) + len(new) + len(flaky_listed) + len(flaky_unlisted)
    if problems:
        print(f"{options.list.name} differs from what Quirl 0.1 fails: {len(stale)} stale, "
              f"{len(new)} new, {len(sometimes)} flaky")
        return 1
    print(f"{options.list.name} is exactly what Quirl 0.1 fails in {options.runs} runs "
          f"({len(always)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
