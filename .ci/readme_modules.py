#!/usr/bin/env python3
"""Each crate README's module table names exactly the modules of its src/.

A crate listed in CRATES keeps a table under `## Modules` in its README.md
whose first column names each module in backticks: top-level modules as
`name`, submodules as `parent::name`. Every module file or directory of
src/ (the crate roots lib.rs and main.rs, and a directory module's own
mod.rs, aside) must be in the table, and every module the table names must
exist.

    python3 .ci/readme_modules.py      check; exit 1 on any problem

One script for every crate, run by .ci/run, so that the rule is written
once (the crates' own packages need no copy of it).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES = ["protocol", "reference-worker", "reference-parent"]


def modules_in(directory: Path, prefix: str = "") -> set[str]:
    found: set[str] = set()
    for path in sorted(directory.iterdir()):
        if path.is_dir():
            module, nested = path.name, True
        elif path.suffix == ".rs":
            module, nested = path.stem, False
        else:
            continue
        if (not prefix and module in ("lib", "main")) or module == "mod":
            continue
        full = f"{prefix}::{module}" if prefix else module
        if nested:
            found |= modules_in(path, full)
        found.add(full)
    return found


def modules_in_readme(readme: str) -> set[str] | None:
    lines = readme.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "## Modules")
    except StopIteration:
        return None
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    named: set[str] = set()
    for row in rows[2:]:  # the header and the separator row
        first = row.split("|")[1] if row.count("|") > 1 else ""
        named |= set(first.split("`")[1::2])
    return named


def main() -> int:
    problems = 0
    for crate in CRATES:
        readme = (ROOT / crate / "README.md").read_text(encoding="utf-8")
        named = modules_in_readme(readme)
        if not named:
            print(f"{crate}/README.md: no `## Modules` table", file=sys.stderr)
            problems += 1
            continue
        actual = modules_in(ROOT / crate / "src")
        for module in sorted(actual - named):
            print(f"{crate}/README.md: module `{module}` of src/ is not in the table", file=sys.stderr)
            problems += 1
        for module in sorted(named - actual):
            print(f"{crate}/README.md: the table names `{module}`, which src/ does not have", file=sys.stderr)
            problems += 1
    if problems:
        print(f"readme_modules: {problems} problem(s)", file=sys.stderr)
        return 1
    print(f"readme_modules: the module tables of {', '.join(CRATES)} match their src/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
