#!/usr/bin/env python3
"""Map every MUST of SPEC.md to the tests that check it (SPEC §1.1).

Every sentence of SPEC.md that uses MUST or MUST NOT carries a label such as
`[§4.3-a]`: the section it stands in, a dash, and a letter that is never
reused within that section. A test cites a requirement by writing its label,
`SPEC §4.3-a`, in a comment (Rust tests) or in the `spec` field of a
conformance case.

    python3 .ci/spec_musts.py          check; exit 1 on any problem
    python3 .ci/spec_musts.py --list   also print every requirement with its tests

The check fails on: a MUST without a label after it in its paragraph, list
item or table cell; a label that covers no MUST; a label whose section is not
the section it stands in; a label used twice; a requirement no test cites;
and a citation of a label that does not exist (in any Rust file or case).

Test code is: every `*/tests/*.rs` file (each one a test target), the
`#[cfg(test)]` modules of `*/src/**/*.rs`, and the cases of
`conformance/cases/*.json`, which the conformance suite runs against the
reference worker and parent. A citation anywhere else does not count.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "SPEC.md"

# MUST (and MUST NOT); SHALL and REQUIRED mean the same (RFC 2119) and need a
# label too, should they ever be used.
KEYWORD = re.compile(r"\b(?:MUST|SHALL|REQUIRED)\b")
LABEL = re.compile(r"\[§(?P<section>[0-9A-Z]+(?:\.[0-9]+)*)-(?P<letter>[a-z]{1,2})\]")
CITATION = re.compile(r"§(?P<section>[0-9A-Z]+(?:\.[0-9]+)*)-(?P<letter>[a-z]{1,2})\b")
HEADING = re.compile(r"^#{2,3} (?:Appendix )?(?P<number>[0-9A-Z]+(?:\.[0-9]+)*)\.? ")
LIST_ITEM = re.compile(r"^\s*(?:[-*]|[0-9]+\.) ")
# §1.1 defines the keywords (and these labels); it names them without using them.
EXEMPT_SECTIONS = {"1.1"}
# String and character literals, removed before braces are counted.
LITERAL = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'')
SKIPPED_DIRS = {"target", ".git", "node_modules"}


@dataclass
class Requirement:
    label: str
    section: str
    line: int
    text: str
    musts: int
    citations: list[tuple[str, int, str]] = field(default_factory=list)


@dataclass
class Problem:
    where: str
    message: str


def spec_units(text: str):
    """Yield (section, first line number, text) for each paragraph, list item
    and table cell of SPEC.md outside fenced code blocks."""
    section = ""
    unit: list[str] = []
    unit_line = 0
    fenced = False

    def flush():
        nonlocal unit
        if unit:
            yield section, unit_line, " ".join(part.strip() for part in unit)
        unit = []

    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            yield from flush()
            fenced = not fenced
            continue
        if fenced:
            continue
        heading = HEADING.match(line)
        if heading:
            yield from flush()
            section = heading.group("number")
            continue
        if not line.strip() or line.startswith("#"):
            yield from flush()
            continue
        if line.lstrip().startswith("|"):
            yield from flush()
            for cell in line.strip().strip("|").split("|"):
                yield section, number, cell.strip()
            continue
        if LIST_ITEM.match(line):
            yield from flush()
        if not unit:
            unit_line = number
        unit.append(line)
    yield from flush()


def sentence_start(text: str, position: int, floor: int = 0) -> str:
    """The words of the sentence around `position` (not before `floor`),
    shortened for a table."""
    start = max(text.rfind(". ", 0, position), text.rfind(": ", 0, position))
    start = max(floor, 0 if start < 0 else start + 2)
    words = re.sub(r"[*`]", "", LABEL.sub("", text[start:])).lstrip("-, ").split()
    shown = " ".join(words[:10])
    return shown if len(words) <= 10 else shown + " …"


def read_requirements(problems: list[Problem]) -> dict[str, Requirement]:
    requirements: dict[str, Requirement] = {}
    for section, line, unit in spec_units(SPEC.read_text(encoding="utf-8")):
        if section in EXEMPT_SECTIONS:
            continue
        pending: list[int] = []
        floor = 0
        events = sorted(
            [(m.start(), "must", m) for m in KEYWORD.finditer(unit)]
            + [(m.start(), "label", m) for m in LABEL.finditer(unit)],
            key=lambda event: event[0],
        )
        for position, kind, match in events:
            if kind == "must":
                pending.append(position)
                continue
            label = f"§{match.group('section')}-{match.group('letter')}"
            where = f"SPEC.md:{line}"
            if match.group("section") != section:
                problems.append(
                    Problem(where, f"label [{label}] stands in §{section}, not §{match.group('section')}")
                )
            if not pending:
                problems.append(Problem(where, f"label [{label}] follows no MUST in its paragraph"))
            if label in requirements:
                problems.append(
                    Problem(where, f"label [{label}] is used twice (also SPEC.md:{requirements[label].line})")
                )
                pending = []
                continue
            requirements[label] = Requirement(
                label,
                section,
                line,
                sentence_start(unit, pending[0] if pending else position, floor),
                len(pending),
            )
            pending = []
            floor = match.end()
        for position in pending:
            problems.append(
                Problem(
                    f"SPEC.md:{line}",
                    f"MUST without a label in §{section}: “{sentence_start(unit, position, floor)}”",
                )
            )
    return requirements


def walk(directory: Path, suffix: str):
    """Files under `directory` ending in `suffix`, build output and hidden
    directories left out, in a stable order."""
    found = []
    for parent, directories, files in os.walk(directory):
        directories[:] = sorted(
            d for d in directories if d not in SKIPPED_DIRS and not d.startswith(".")
        )
        found.extend(Path(parent) / name for name in files if name.endswith(suffix))
    return sorted(found)


def rust_test_lines(path: Path, lines: list[str]) -> set[int]:
    """Indices of the lines of `path` that are test code."""
    if path.parent.name == "tests":
        return set(range(len(lines)))
    found: set[int] = set()
    index = 0
    while index < len(lines):
        if lines[index].strip() != "#[cfg(test)]":
            index += 1
            continue
        start = index
        depth = 0
        opened = False
        while index < len(lines):
            code = LITERAL.sub('""', lines[index]).split("//", 1)[0]
            depth += code.count("{") - code.count("}")
            opened = opened or "{" in code
            found.add(index)
            index += 1
            if opened and depth <= 0:
                break
            if not opened and code.rstrip().endswith(";") and index - 1 > start:
                break
    return found


FN = re.compile(r"^\s*(?:pub(?:\([a-z]+\))? )?(?:async )?fn (?P<name>[A-Za-z0-9_]+)")


def test_name(lines: list[str], index: int) -> str:
    """The function a citation belongs to: the one its comment heads, else the
    one it stands in."""
    if lines[index].lstrip().startswith("//"):
        after = index + 1
        while after < len(lines) and (
            lines[after].lstrip().startswith(("//", "#[")) or not lines[after].strip()
        ):
            after += 1
        if after < len(lines):
            heading = FN.match(lines[after])
            if heading:
                return heading.group("name")
    for before in range(index, -1, -1):
        heading = FN.match(lines[before])
        if heading:
            return heading.group("name")
    return "(file)"


def citations():
    """Yield (label, location, test, counts) for every citation of a label:
    `counts` is whether it stands in test code. A citation outside test code
    does not count, but a stale one fails all the same."""
    for path in walk(ROOT, ".rs"):
        relative = path.relative_to(ROOT)
        lines = path.read_text(encoding="utf-8").splitlines()
        if "tests" in relative.parts and path.parent.name != "tests":
            test_lines: set[int] = set()  # helpers under tests/common, tests/support
        else:
            test_lines = rust_test_lines(path, lines)
        for index, line in enumerate(lines):
            for match in CITATION.finditer(line):
                label = f"§{match.group('section')}-{match.group('letter')}"
                yield label, f"{relative}:{index + 1}", test_name(lines, index), index in test_lines
    for path in sorted((ROOT / "conformance" / "cases").glob("*.json")):
        relative = path.relative_to(ROOT)
        text = path.read_text(encoding="utf-8")
        for case in json.loads(text).get("cases", []):
            name = case.get("name", "?")
            line = next(
                (n for n, row in enumerate(text.splitlines(), start=1) if f'"{name}"' in row), 0
            )
            for match in CITATION.finditer(json.dumps(case, ensure_ascii=False)):
                label = f"§{match.group('section')}-{match.group('letter')}"
                yield label, f"{relative}:{line}", name, True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print every requirement and its tests")
    arguments = parser.parse_args()

    problems: list[Problem] = []
    requirements = read_requirements(problems)
    for label, location, test, counts in citations():
        if label in requirements:
            if counts:
                requirements[label].citations.append((location, 0, test))
        else:
            problems.append(Problem(location, f"{test} cites {label}, which SPEC.md does not define"))

    musts = sum(requirement.musts for requirement in requirements.values())
    if arguments.list:
        print(f"{musts} MUSTs under {len(requirements)} labels")
        print(f"{'label':<10} {'tests':>5}  {'example':<52} requirement")
        for requirement in requirements.values():
            tests = {(location.split(":")[0], test) for location, _, test in requirement.citations}
            example = requirement.citations[0][0] if requirement.citations else "-"
            print(f"{requirement.label:<10} {len(tests):>5}  {example:<52} {requirement.text}")

    for requirement in requirements.values():
        if not requirement.citations:
            problems.append(
                Problem(
                    f"SPEC.md:{requirement.line}",
                    f"no test cites [{requirement.label}]: “{requirement.text}”",
                )
            )
    if problems:
        for problem in problems:
            print(f"{problem.where}: {problem.message}", file=sys.stderr)
        print(f"spec_musts: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"spec_musts: {musts} MUSTs under {len(requirements)} labels, each cited by a test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
