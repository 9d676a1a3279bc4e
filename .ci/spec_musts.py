#!/usr/bin/env python3
"""Map every MUST of SPEC.md and DESIGN.md to the tests that check it (SPEC §1.1).

SPEC.md is the protocol; DESIGN.md, beside it, the reference implementation's
design (its sections keep the numbers 15–18, so labels are unique across
both). Every sentence of either that uses MUST or MUST NOT carries a label
such as `[§4.3-a]`: the section it stands in, a dash, and a letter that is
never reused within that section. A requirement is named with its document,
`SPEC §4.3-a` or `DESIGN §15.6-a`. A test cites it by writing that name in a
comment (Rust tests), or the bare label in the `spec` field of a conformance
case.

    python3 .ci/spec_musts.py          check; exit 1 on any problem
    python3 .ci/spec_musts.py --list   also print every requirement with its tests

The check fails on: a MUST without a label after it in its paragraph, list
item or table cell; a label that covers no MUST; a label whose section is not
the section it stands in; a label used twice (in one document or across the
two); a requirement no test cites; a citation of a label that does not exist
(in any Rust file or case); and a citation whose document prefix names the
other document (a label of DESIGN.md cited with the prefix `SPEC`).

Test code is: every `*/tests/*.rs` file (each one a test target), the
`#[cfg(test)]` modules of `*/src/**/*.rs`, and the cases of
`conformance/cases/*.json`, which the conformance suite runs against the
reference worker and parent. A citation anywhere else does not count.

A test that can skip counts only when CI turns its skip into a failure.
Tests that need something of the machine return early where it is missing:
through `skip("NEED", …)` (the test kit's `environment::skip`, or the copy
in the reference parent's unit tests), through an inline check of
`QUIRL_TEST_REQUIRE` (the names it compares are its needs), or by printing
a "skipped" line of their own (a need nobody requires: a missing program,
`QUIRL_BIN` unset). A test function can skip when its body, or a function
of the same file it calls (transitively), does one of these. `skip` panics
instead when `QUIRL_TEST_REQUIRE` names the need, and `.ci/run` sets that
variable to every need the machine offers (the names it can append there
are read from `.ci/run` itself). So a citation inside a test that can skip
counts only if every need it may skip for is one `.ci/run` can require;
otherwise it stays valid (a stale one still fails) but covers nothing, and
`--list` shows it under "skips". A citation in a file's head comment, outside
every function, counts only if no function of that file can skip for a need
CI does not require. The rule is static: it sees a skip only through
functions of the same file, where every skip of this tree stands.
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
# The documents, by the name a citation gives them.
DOCUMENTS = {"SPEC": ROOT / "SPEC.md", "DESIGN": ROOT / "DESIGN.md"}
CI_RUN = ROOT / ".ci" / "run"

# MUST (and MUST NOT); SHALL and REQUIRED mean the same (RFC 2119) and need a
# label too, should they ever be used.
KEYWORD = re.compile(r"\b(?:MUST|SHALL|REQUIRED)\b")
LABEL = re.compile(r"\[§(?P<section>[0-9A-Z]+(?:\.[0-9]+)*)-(?P<letter>[a-z]{1,2})\]")
CITATION = re.compile(
    r"(?:\b(?P<document>SPEC|DESIGN)(?:\.md)? )?"
    r"§(?P<section>[0-9A-Z]+(?:\.[0-9]+)*)-(?P<letter>[a-z]{1,2})\b"
)
HEADING = re.compile(r"^#{2,3} (?:Appendix )?(?P<number>[0-9A-Z]+(?:\.[0-9]+)*)\.? ")
LIST_ITEM = re.compile(r"^\s*(?:[-*]|[0-9]+\.) ")
# §1.1 defines the keywords (and these labels); it names them without using them.
EXEMPT_SECTIONS = {"1.1"}
# String and character literals, removed before braces are counted.
LITERAL = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'')
SKIPPED_DIRS = {"target", ".git", "node_modules"}


@dataclass
class Requirement:
    document: str
    label: str
    section: str
    line: int
    text: str
    musts: int
    citations: list[tuple[str, int, str]] = field(default_factory=list)
    skipping: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The requirement as a test cites it: `SPEC §4.3-a`."""
        return f"{self.document} {self.label}"


@dataclass
class Problem:
    where: str
    message: str


def spec_units(text: str):
    """Yield (section, first line number, text) for each paragraph, list item
    and table cell of a document outside fenced code blocks."""
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
    """Every label of both documents, by label (`§4.3-a`)."""
    requirements: dict[str, Requirement] = {}
    for document, path in DOCUMENTS.items():
        read_document(document, path, requirements, problems)
    return requirements


def read_document(
    document: str, path: Path, requirements: dict[str, Requirement], problems: list[Problem]
) -> None:
    file_name = path.name
    for section, line, unit in spec_units(path.read_text(encoding="utf-8")):
        if document == "SPEC" and section in EXEMPT_SECTIONS:
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
            where = f"{file_name}:{line}"
            if match.group("section") != section:
                problems.append(
                    Problem(where, f"label [{label}] stands in §{section}, not §{match.group('section')}")
                )
            if not pending:
                problems.append(Problem(where, f"label [{label}] follows no MUST in its paragraph"))
            if label in requirements:
                problems.append(
                    Problem(
                        where,
                        f"label [{label}] is used twice (also "
                        f"{DOCUMENTS[requirements[label].document].name}:{requirements[label].line})",
                    )
                )
                pending = []
                continue
            requirements[label] = Requirement(
                document,
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
                    f"{file_name}:{line}",
                    f"MUST without a label in {document} §{section}: "
                    f"“{sentence_start(unit, position, floor)}”",
                )
            )


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


# A skip: `skip("NEED"` (whatever path names the function), an inline check
# of QUIRL_TEST_REQUIRE, or a "skipped" line printed by other means.
SKIP_CALL = re.compile(r'\bskip\(\s*"(?P<need>[a-z][a-z0-9-]*)"')
REQUIRE_CHECK = re.compile(r"QUIRL_TEST_REQUIRE")
REQUIRE_NAME = re.compile(r'==\s*"(?P<need>[a-z][a-z0-9-]*)"')
SKIP_LINE = re.compile(r'(?:eprintln|println)!\(\s*"(?:SKIPPED|skipped)\b')
# A need no CI run requires: a "skipped" line without a `skip` call.
UNREQUIRED = "(not required)"
# `.ci/run` builds QUIRL_TEST_REQUIRE as `require="NAME"` / `require="$require,NAME"`.
CI_REQUIRE = re.compile(r'\brequire="(?:\$require,)?(?P<need>[a-z][a-z0-9-]*)"')


def ci_required_needs() -> set[str]:
    """The needs `.ci/run` can put in QUIRL_TEST_REQUIRE."""
    if not CI_RUN.exists():
        return set()
    return {m.group("need") for m in CI_REQUIRE.finditer(CI_RUN.read_text(encoding="utf-8"))}


def function_spans(lines: list[str]) -> list[tuple[str, int, int]]:
    """(name, first line, last line) of every `fn` with a body in `lines`."""
    spans = []
    for index, line in enumerate(lines):
        heading = FN.match(line)
        if not heading:
            continue
        depth = 0
        opened = False
        end = index
        while end < len(lines):
            code = LITERAL.sub('""', lines[end]).split("//", 1)[0]
            depth += code.count("{") - code.count("}")
            opened = opened or "{" in code
            if opened and depth <= 0:
                break
            if not opened and code.rstrip().endswith(";"):
                break
            end += 1
        if opened:
            spans.append((heading.group("name"), index, min(end, len(lines) - 1)))
    return spans


def skip_needs(lines: list[str]) -> dict[str, set[str]]:
    """For each function of a file that can skip, what it may skip for: the
    needs of its own skips and of the same file's functions it calls."""
    spans = function_spans(lines)
    own: dict[str, set[str]] = {}
    bodies: dict[str, str] = {}
    for name, first, last in spans:
        # A nested function's lines belong to it, and to its container too.
        body = "\n".join(lines[first : last + 1])
        bodies[name] = bodies.get(name, "") + "\n" + body
        needs = own.setdefault(name, set())
        needs.update(m.group("need") for m in SKIP_CALL.finditer(body))
        if REQUIRE_CHECK.search(body):
            needs.update(m.group("need") for m in REQUIRE_NAME.finditer(body))
        elif SKIP_LINE.search(body) and not SKIP_CALL.search(body):
            needs.add(UNREQUIRED)
    calls = {
        name: {other for other in own if other != name and re.search(rf"\b{other}\s*\(", body)}
        for name, body in bodies.items()
    }
    needs = {name: set(found) for name, found in own.items()}
    changed = True
    while changed:
        changed = False
        for name, callees in calls.items():
            for callee in callees:
                if not needs[callee] <= needs[name]:
                    needs[name] |= needs[callee]
                    changed = True
    return {name: found for name, found in needs.items() if found}


def citations():
    """Yield (document, label, location, test, counts, skips) for every
    citation of a label: `document` is the prefix it was written with (None
    when bare); `counts` is whether it stands in test code; `skips` what the
    test may skip for (empty when it cannot). A citation outside test code
    does not count, but a stale one fails all the same."""
    for path in walk(ROOT, ".rs"):
        relative = path.relative_to(ROOT)
        lines = path.read_text(encoding="utf-8").splitlines()
        if "tests" in relative.parts and path.parent.name != "tests":
            test_lines: set[int] = set()  # helpers under tests/common, tests/support
        else:
            test_lines = rust_test_lines(path, lines)
        skips = skip_needs(lines)
        file_skips = set().union(*skips.values()) if skips else set()
        for index, line in enumerate(lines):
            for match in CITATION.finditer(line):
                label = f"§{match.group('section')}-{match.group('letter')}"
                test = test_name(lines, index)
                needs = file_skips if test == "(file)" else skips.get(test, set())
                yield (
                    match.group("document"),
                    label,
                    f"{relative}:{index + 1}",
                    test,
                    index in test_lines,
                    needs,
                )
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
                yield match.group("document"), label, f"{relative}:{line}", name, True, set()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print every requirement and its tests")
    arguments = parser.parse_args()

    problems: list[Problem] = []
    requirements = read_requirements(problems)
    required = ci_required_needs()
    for document, label, location, test, counts, needs in citations():
        requirement = requirements.get(label)
        if requirement is None:
            named = f"{document} {label}" if document else label
            where = f"{document}.md" if document else "SPEC.md or DESIGN.md"
            problems.append(Problem(location, f"{test} cites {named}, which {where} does not define"))
            continue
        if document is not None and document != requirement.document:
            problems.append(
                Problem(
                    location,
                    f"{test} cites {document} {label}, but the label is {requirement.name} "
                    f"({DOCUMENTS[requirement.document].name}:{requirement.line})",
                )
            )
            continue
        if not counts:
            continue
        unrequired = needs - required
        if unrequired:
            requirement.skipping.append((location, test, ", ".join(sorted(unrequired))))
        else:
            requirement.citations.append((location, 0, test))

    musts = sum(requirement.musts for requirement in requirements.values())
    if arguments.list:
        by_document = {
            document: sum(1 for r in requirements.values() if r.document == document)
            for document in DOCUMENTS
        }
        counts_text = ", ".join(f"{n} in {document}.md" for document, n in by_document.items())
        print(f"{musts} MUSTs under {len(requirements)} labels ({counts_text})")
        print(f"{'requirement':<17} {'tests':>5} {'skips':>5}  {'example':<52} text")
        for requirement in requirements.values():
            tests = {(location.split(":")[0], test) for location, _, test in requirement.citations}
            example = requirement.citations[0][0] if requirement.citations else "-"
            print(
                f"{requirement.name:<17} {len(tests):>5} {len(requirement.skipping):>5}  "
                f"{example:<52} {requirement.text}"
            )
        skipping = [(r, s) for r in requirements.values() for s in r.skipping]
        if skipping:
            print("\ncitations that do not count (the test can skip for a need CI does not require):")
            for requirement, (location, test, needs) in skipping:
                print(f"  {requirement.name:<17} {location} {test}: may skip for {needs}")

    for requirement in requirements.values():
        if not requirement.citations:
            also = ""
            if requirement.skipping:
                also = " (only tests that can skip for a need CI does not require: " + ", ".join(
                    f"{test} for {needs}" for _, test, needs in requirement.skipping
                ) + ")"
            problems.append(
                Problem(
                    f"{DOCUMENTS[requirement.document].name}:{requirement.line}",
                    f"no test cites [{requirement.label}] ({requirement.name}){also}: "
                    f"“{requirement.text}”",
                )
            )
    if problems:
        for problem in problems:
            print(f"{problem.where}: {problem.message}", file=sys.stderr)
        print(f"spec_musts: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(
        f"spec_musts: {musts} MUSTs under {len(requirements)} labels of SPEC.md and DESIGN.md, "
        "each cited by a test"
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        # `--list | head`: the reader has what it wanted.
        sys.stderr.close()
        sys.exit(0)
