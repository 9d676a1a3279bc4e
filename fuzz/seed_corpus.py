#!/usr/bin/env python3
"""Generate the committed seed corpora of the fuzz targets.

Re-runnable: it deletes every `corpus/<target>/seed-*` file and writes the
seeds again, deterministically, from `fixtures/manifest.json` (whatever is
there when it runs) plus fixed pseudo-random inputs for the
structure-aware targets. Files the fuzzer adds to `corpus/<target>/` (any
name not starting with `seed-`) are left alone and ignored by git.

    python3 fuzz/seed_corpus.py            # from the repository root
"""

import hashlib
import json
import random
import struct
from pathlib import Path

FUZZ = Path(__file__).resolve().parent
ROOT = FUZZ.parent
FIXTURES = ROOT / "fixtures"
CORPUS = FUZZ / "corpus"

# Larger seeds only slow the fuzzer down; the decoder bound is exercised by
# the declared lengths, not by sending megabytes.
SEED_MAX = 64 * 1024

GENERATED = {
    # target: (count, min length, max length)
    "round_trip": (48, 8, 400),
    "strictness": (72, 8, 400),
    "validation": (48, 4, 96),
    "parent_session": (48, 16, 600),
    "worker_session": (48, 16, 600),
    "lua_programs": (16, 4, 120),
}
MUTATIONS = 9  # targets::Mutation::ALL.len()


def split_frames(stream):
    """Complete payloads of a framed stream, up to the first framing error."""
    out, pos = [], 0
    while len(stream) - pos >= 4:
        (length,) = struct.unpack(">I", stream[pos : pos + 4])
        if length == 0 or len(stream) - pos - 4 < length:
            break
        out.append(stream[pos + 4 : pos + 4 + length])
        pos += 4 + length
    return out


def name_for(label, data):
    digest = hashlib.sha1(data).hexdigest()[:12]
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in label)[:60]
    return f"seed-{safe}-{digest}"


def write(target, label, data, written):
    directory = CORPUS / target
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name_for(label, data)
    if path.name not in written.setdefault(target, set()):
        path.write_bytes(data)
        written[target].add(path.name)


def fixture_seeds(written):
    manifest_path = FIXTURES / "manifest.json"
    if not manifest_path.exists():
        return 0
    count = 0
    for entry in json.loads(manifest_path.read_text()):
        path = FIXTURES / entry["file"]
        if not path.exists():
            continue
        stream = path.read_bytes()
        label = Path(entry["file"]).stem
        worker = entry["direction"] == "worker_to_parent"
        direction_bit = 0x80 if worker else 0x00
        # decoder_chunking: control byte (2 chunk sizes, default limit,
        # direction), sizes 6 and 512 bytes, then the stream (cut at SEED_MAX).
        head = stream[:SEED_MAX]
        write("decoder_chunking", label, bytes([0x02 | direction_bit, 0x05, 0x81]) + head, written)
        # ... and a copy with a small payload limit (class 4: 100 bytes).
        write("decoder_chunking", label + "-limit100", bytes([0x40 | direction_bit]) + head[:512], written)
        target = "worker_frame" if worker else "parent_frame"
        for index, payload in enumerate(split_frames(stream)):
            if len(payload) <= SEED_MAX:
                write(target, f"{label}-{index}", payload, written)
        count += 1
    return count


def builtin_seeds(written):
    """Seeds that do not depend on fixtures/ (Quirl's two published frames)."""
    request = b'{"kind":"request","request":{"version":1,"id":7,"operation":{"operation":"eval","source":"return 42"}}}'
    response = b'{"kind":"response","response":{"version":1,"id":7,"ok":true,"result":42}}'
    write("parent_frame", "quirl-request", request, written)
    write("worker_frame", "quirl-response", response, written)
    framed = struct.pack(">I", len(request)) + request
    write("decoder_chunking", "quirl-request-x2", bytes([0x00]) + framed * 2, written)
    write("decoder_chunking", "header-cap", bytes([0x00]) + struct.pack(">I", 5_242_880) + b"0123456789", written)
    write("decoder_chunking", "header-cap-plus-one", bytes([0x00]) + struct.pack(">I", 5_242_881), written)
    write("decoder_chunking", "header-zero", bytes([0x00, 0, 0, 0, 0]), written)
    # Session happy paths (action bytes as decoded by testkit/src/sessions.rs):
    # initialize with process access (policy and flag), ok; eval; one host call and its
    # response; the eval's response.
    write("worker_session", "happy-path", bytes([
        0, 2, 0, 1, 1,          # receive request: id last+1, initialize (script policy, process on)
        6, 0,                   # respond(Ok(null))
        0, 2, 1, 1, 0,          # receive request: id 2, eval ""
        8, 0, 1, 5, 2, 7,       # host_call("", 5 ms, 7 bytes)
        2, 0, 1, 1, 0, 0, 0, 0, 0,  # receive host response echoing (2, 1), outcome (the generator's, not Arbitrary's)
        6, 1,                   # respond(Ok(5))
    ]), written)
    write("parent_session", "happy-path", bytes([
        1, 0, 1, 1,             # request(initialize, script policy, process on)
        4, 0, 0,                # receive response id 1, null
        1, 1, 1, 0,             # request(eval "")
        6, 0, 0, 0, 1, 5, 2, 7,  # receive host call (2, 1)
        3, 1, 0,                # host_response(outcome)
        5, 0, 1,                # receive response payload id 2, 5
    ]), written)


def generated_seeds(written):
    rng = random.Random(0x5EED)
    for target, (count, low, high) in GENERATED.items():
        for index in range(count):
            data = bytearray(rng.randrange(256) for _ in range(rng.randint(low, high)))
            if target == "strictness":
                data[0] = index % MUTATIONS
            write(target, f"gen{index:03}", bytes(data), written)


def churn_seeds(written):
    """lua_programs inputs that are table churn programs (first byte 0xFF,
    testkit/src/lua_programs.rs CHURN_SELECTOR), run twice by the target."""
    rng = random.Random(0xC4C4)
    for index in range(6):
        data = bytes([0xFF]) + bytes(rng.randrange(256) for _ in range(rng.randint(4, 24)))
        write("lua_programs", f"churn{index:02}", data, written)


# pattern_differential: header (kind, sel, a, b), then subject, pattern and
# replacement separated by 0xff (see testkit/src/patterns.rs).
PATTERN_SEEDS = [
    (0, 0, 0, 0, b"key=val", b"(%w+)=(%w+)", b""),
    (1, 0, 0, 0, b"  padded  ", b"^%s*(.-)%s*$", b""),
    (2, 0, 80, 0, b"one two  three", b"%a+", b""),
    (3, 0, 0, 0, b"hello world", b"(o)", b"[%1%%%0]"),
    (4, 2, 0, 0, b"a1b2", b"(%a)(%d)", b""),
    (4, 6, 0, 0, b"abc", b"()%w", b""),
    (0, 0, 100, 64, b"a.b", b".", b""),
    (1, 0, 0, 0, b"f(a(b)c) d", b"%b()%f[%w]%w+", b""),
    (1, 0, 0, 0, b"xyyx", b"(.)(.)%2%1", b""),
    (3, 0, 0, 90, b"abc", b"", b"-"),
    (1, 0, 0, 0, b"a]b-c", b"[]%-][^a-c]", b""),
    (1, 0, 0, 0, b"a", b"[a", b""),
    (3, 0, 0, 0, b"a", b"a", b"%"),
    (1, 0, 0, 0, b"aaaaaaaaaaaaaaaab", b"a*a*a*a*a*a*a*a*c", b""),
]


def pattern_seeds(written):
    for index, (kind, sel, a, b, subject, pattern, repl) in enumerate(PATTERN_SEEDS):
        data = bytes([kind, sel, a, b]) + subject + b"\xff" + pattern + b"\xff" + repl
        write("pattern_differential", f"case{index:02}", data, written)


def main():
    if CORPUS.exists():
        for old in CORPUS.glob("*/seed-*"):
            old.unlink()
    written = {}
    fixtures = fixture_seeds(written)
    builtin_seeds(written)
    generated_seeds(written)
    churn_seeds(written)
    pattern_seeds(written)
    for target in sorted(written):
        print(f"{target}: {len(written[target])} seeds")
    print(f"({fixtures} fixture streams read)")


if __name__ == "__main__":
    main()
