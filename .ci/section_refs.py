#!/usr/bin/env python3
"""Every `SPEC §x` and `DESIGN §x` reference names the document that holds §x.

SPEC.md holds the protocol (§1–§14, §15.1, §16.1, §17.1, §18, §19 and the
appendices); DESIGN.md, the reference implementation's design, keeps the
numbers 15–18 for its own sections (§15.2–§15.12, §16.2–§16.8, §17.2–§17.7,
§18.1–§18.6). A reference that gives a DESIGN section to SPEC (or a SPEC
section to DESIGN) sends a reader to a section that document does not
have. This check reads the
section headings of both documents and fails on every reference, in any
source, script, case, manifest or Markdown file of the repository, whose
document has no such section. (Requirement labels, `SPEC §4.3-a`, are
checked the same way here and against their requirement by
`.ci/spec_musts.py`.)

    python3 .ci/section_refs.py        check; exit 1 on a wrong reference

Only the section right after the document's name is checked: in
`SPEC §4–§7` or `DESIGN §15.2–§15.12` the second number belongs to the
same document and is checked only when it names it again.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = {"SPEC": ROOT / "SPEC.md", "DESIGN": ROOT / "DESIGN.md"}
HEADING = re.compile(r"^#{2,4} (?:Appendix )?(?P<number>[0-9A-Z]+(?:\.[0-9]+)*)\.? ")
REFERENCE = re.compile(
    r"\b(?P<document>SPEC|DESIGN)(?:\.md)?(?:'s)? §(?P<section>[0-9]+(?:\.[0-9]+)*)"
)
SUFFIXES = (".rs", ".py", ".json", ".toml", ".md", ".sh", ".lua", ".txt", ".yml")
EXTRA_FILES = (ROOT / ".ci" / "run",)
SKIPPED_DIRS = {"target", ".git", "corpus", "node_modules"}


def sections(path: Path) -> set[str]:
    found = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        match = HEADING.match(line)
        if match:
            number = match.group("number")
            found.add(number)
            # `§5` also names the section whose heading is `5. JSON profile`
            # with its subsections, and `§A` the appendix.
    return found


def files():
    for parent, directories, names in os.walk(ROOT):
        directories[:] = sorted(
            d for d in directories if d not in SKIPPED_DIRS and not d.startswith(".") or d == ".ci"
        )
        for name in sorted(names):
            if name.endswith(SUFFIXES):
                yield Path(parent) / name
    yield from EXTRA_FILES


def holds(known: set[str], section: str) -> bool:
    """Whether a document with headings `known` has §`section`: the heading
    itself, or, for a section given less precisely than the headings go
    (`§5` where the headings are `5.1`…), one of its subsections."""
    return section in known or any(number.startswith(section + ".") for number in known)


def main() -> int:
    known = {name: sections(path) for name, path in DOCUMENTS.items()}
    problems = []
    checked = 0
    for path in files():
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            for match in REFERENCE.finditer(line):
                checked += 1
                document, section = match.group("document"), match.group("section")
                if holds(known[document], section):
                    continue
                other = "DESIGN" if document == "SPEC" else "SPEC"
                hint = (
                    f"; {other}.md has it: write `{other} §{section}`"
                    if holds(known[other], section)
                    else "; neither document has it"
                )
                problems.append(
                    f"{path.relative_to(ROOT)}:{number}: `{match.group(0)}`: "
                    f"{document}.md has no §{section}{hint}"
                )
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} reference(s) name the wrong document", file=sys.stderr)
        return 1
    print(f"{checked} SPEC/DESIGN section references, each naming the document that holds it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
