#!/usr/bin/env python3
"""The public API of the library crates, as a committed listing checked in CI.

    python3 .ci/public_api.py                      # check every crate's listing
    python3 .ci/public_api.py --update             # rewrite every listing
    python3 .ci/public_api.py --update quirl-lua-protocol   # one crate

For each crate of CRATES it builds the API docs on stable
(`cargo doc -p CRATE --no-deps --all-features --locked`, with the
RUSTDOCFLAGS of `.ci/run`, so CI reuses its own doc build) and reads the
public API out of rustdoc's HTML: every item page (struct, enum, trait,
function, constant, type alias, macro …) by its public path, with its
declaration (fields and variants included), the signatures of its inherent
methods, the headers of its trait implementations and auto traits (`Send`,
`Sync`, `Unpin`, …), and every module's re-exports. Blanket
implementations (`impl<T> From<T> for T` …) come from the standard library
and are left out. The listing is `.ci/public-api/CRATE.txt`; `--check`
(the default) fails with a diff when the built API differs from it, so a
change to the public API is a deliberate, reviewed edit of that file
(see the crate README's "Semantic versioning").

Why rustdoc's HTML: rustdoc already resolves what is public after
re-exports, `cfg`s and visibility, which a source parser would have to
redo; its JSON output needs a nightly toolchain (cargo-public-api,
cargo-semver-checks), and building those tools would cost CI minutes.
Signatures are compared after whitespace is normalized, so a rustdoc that
only wraps lines differently changes nothing; a rustdoc that renders a
signature differently needs one `--update` and a look at the diff.
"""

import difflib
import html
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LISTINGS = ROOT / ".ci" / "public-api"
CRATES = {
    # package name: library name
    "quirl-lua-protocol": "quirl_lua_protocol",
    "quirl-lua-reference-parent": "quirl_lua_reference_parent",
}
# Item pages by their file name prefix (rustdoc's item kinds).
ITEM_PREFIXES = (
    "struct.", "enum.", "trait.", "fn.", "constant.", "static.", "type.",
    "macro.", "union.", "traitalias.", "derive.", "attr.",
)
# Sections of an item page: the inherent methods are listed with their
# signatures, trait and auto-trait implementations by their headers only.
SECTIONS = [
    ("implementations-list", "methods"),
    ("trait-implementations-list", "headers"),
    ("synthetic-implementations-list", "headers"),
    ("blanket-implementations-list", None),
    ("implementors-list", "headers"),
    ("synthetic-implementors-list", "headers"),
    ("dyn-compatibility", None),
]


# The auto traits a caller can rely on (the ones cargo-semver-checks checks);
# rustdoc also shows unstable ones (`Freeze`, `UnsafeUnpin`), which come and
# go with the toolchain.
AUTO_TRAITS = re.compile(r"^impl(<[^>]*>)? !?(Send|Sync|Unpin|UnwindSafe|RefUnwindSafe) for ")


def host_triple():
    out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    return re.search(r"^host: (\S+)$", out, re.M).group(1)


def build_docs(package):
    env = dict(os.environ)
    env.setdefault("RUSTDOCFLAGS", "-D warnings")
    subprocess.run(
        ["cargo", "doc", "-p", package, "--no-deps", "--all-features", "--locked", "--quiet"],
        cwd=ROOT, env=env, check=True,
    )


def doc_dir(library):
    # .cargo/config.toml builds for the host as an explicit target.
    for candidate in (ROOT / "target" / host_triple() / "doc" / library, ROOT / "target" / "doc" / library):
        if candidate.is_dir():
            return candidate
    sys.exit(f"no rustdoc output for {library} under target/")


class Text(HTMLParser):
    """The text of an HTML fragment, tags dropped, entities decoded."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts = []

    def handle_data(self, data):
        self.parts.append(data)


def text_of(fragment):
    # A long declaration is folded behind a "Show N variants" toggle.
    fragment = re.sub(r"<summary[^>]*>.*?</summary>", "", fragment, flags=re.S)
    parser = Text()
    parser.feed(fragment)
    return normalize("".join(parser.parts))


def normalize(text):
    """One line, whitespace as rustdoc's line wrapping cannot change it."""
    text = html.unescape(text).replace("\xa0", " ")
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"([(<\[{]) ", r"\1", text)
    text = re.sub(r" ([)>\]},;])", r"\1", text)
    text = re.sub(r",([)>\]}])", r"\1", text)  # a trailing comma of a wrapped list
    text = re.sub(r"([>)\]])where ", r"\1 where ", text)
    return text


def code_headers(fragment, levels):
    pattern = r'<h([%s]) class="code-header">(.*?)</h\1>' % levels
    return [(int(level), text_of(body)) for level, body in re.findall(pattern, fragment, re.S)]


def section(page, section_id):
    start = page.find(f'id="{section_id}"')
    if start < 0:
        return ""
    ends = [page.find(f'id="{other}"', start + 1) for other, _ in SECTIONS]
    ends = [end for end in ends if end > start]
    end = min(ends) if ends else len(page)
    return page[start:end]


def item_lines(page):
    lines = []
    decl = re.search(r'<pre class="rust item-decl"><code>(.*?)</code></pre>', page, re.S)
    if decl:
        lines.append("    " + text_of(decl.group(1)))
    for section_id, what in SECTIONS:
        if what is None:
            continue
        part = section(page, section_id)
        if not part:
            continue
        for level, header in code_headers(part, "34" if what == "methods" else "3"):
            if section_id.startswith("synthetic") and not AUTO_TRAITS.search(header):
                continue
            lines.append(("    " if level == 3 else "        ") + header)
    return lines


def reexport_lines(page):
    table = re.search(r'<dl class="item-table reexports">(.*?)</dl>', page, re.S)
    if not table:
        return []
    return ["    " + text_of(code) for code in re.findall(r"<code>(.*?)</code>", table.group(1), re.S)]


def listing(library):
    base = doc_dir(library)
    blocks = []
    for path in sorted(base.rglob("*.html")):
        relative = path.relative_to(base)
        if relative.parts[0] in ("src",) or path.name in ("all.html",):
            continue
        page = path.read_text(encoding="utf-8")
        modules = [library, *relative.parts[:-1]]
        if path.name == "index.html":
            lines = reexport_lines(page)
            if lines:
                blocks.append(("::".join(modules) + " (re-exports)", lines))
            continue
        if not path.name.startswith(ITEM_PREFIXES):
            continue
        kind, name = path.name[: -len(".html")].split(".", 1)
        blocks.append((f"{kind} " + "::".join([*modules, name]), item_lines(page)))
    blocks.sort(key=lambda block: block[0].split(" ", 1)[-1] + " " + block[0])
    out = [
        f"# The public API of {library} (all features), from rustdoc: `python3 .ci/public_api.py`.",
        "# Regenerate with `python3 .ci/public_api.py --update`; review the diff as an API change.",
    ]
    for title, lines in blocks:
        out.append(title)
        out.extend(lines)
    return "\n".join(out) + "\n"


def main(argv):
    update = "--update" in argv
    chosen = [arg for arg in argv if not arg.startswith("--")] or list(CRATES)
    unknown = [name for name in chosen if name not in CRATES]
    if unknown:
        sys.exit(f"not a library crate of the listing: {', '.join(unknown)} (known: {', '.join(CRATES)})")
    failed = False
    for package in chosen:
        build_docs(package)
        current = listing(CRATES[package])
        file = LISTINGS / f"{package}.txt"
        if update:
            LISTINGS.mkdir(parents=True, exist_ok=True)
            file.write_text(current, encoding="utf-8")
            print(f"wrote {file.relative_to(ROOT)} ({current.count(chr(10))} lines)")
            continue
        committed = file.read_text(encoding="utf-8") if file.exists() else ""
        if committed != current:
            failed = True
            diff = difflib.unified_diff(
                committed.splitlines(), current.splitlines(),
                f"{file.relative_to(ROOT)} (committed)", f"{package} (built)", lineterm="", n=1,
            )
            print("\n".join(diff), file=sys.stderr)
            print(
                f"the public API of {package} changed: if that is intended, run "
                f"`python3 .ci/public_api.py --update {package}`, commit the listing and add a "
                f"CHANGELOG entry (the README's semantic versioning policy says which version it needs)",
                file=sys.stderr,
            )
        else:
            print(f"{package}: public API as listed ({current.count(chr(10))} lines)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
