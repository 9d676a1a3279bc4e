#!/usr/bin/env python3
"""Run reference-parent's `tokio_pool` example on a mix of snippets and check
what it prints (issue 37's adoption test, DESIGN §17.7):

a value, a Lua error, an endless loop (limit: instructions, well under the
200 ms deadline), a memory bomb (limit: memory), `quirl.process.run('sleep
5')` (the parent's deadline, at most 250 ms), each followed by a value that
must succeed on a fresh worker; the stats line must match what happened;
and nothing the example started may outlive it.

usage: tokio_pool_check.py EXAMPLE WORKER [WORKER ARGS...]
"""
import json
import os
import subprocess
import sys
import time

SNIPPETS = [
    ("return 6 * 7", ("ok", 42)),
    ("error('boom')", ("guest", None)),
    ("return 1", ("ok", 1)),
    ("while true do end", ("limit", "instructions")),
    ("return 2", ("ok", 2)),
    ("return #string.rep('x', 1 << 24)", ("limit", "memory")),
    ("return 3", ("ok", 3)),
    ("return quirl.process.run('sleep 5').status", ("deadline", "deadline")),
    ("return 4", ("ok", 4)),
    ("return quirl.process.run('echo hi').value", ("ok", "hi\n")),
    ("return 5", ("ok", 5)),
]


def processes():
    """(pid, exe, argv) of every process we may read."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = [a.decode(errors="replace") for a in handle.read().split(b"\0") if a]
            exe = os.readlink(f"/proc/{entry}/exe")
        except OSError:
            continue
        found.append((int(entry), exe, argv))
    return found


def leftovers(worker_exe, before):
    """Processes the run may have left: workers and `sleep 5` commands that
    did not exist before it."""
    return [
        (pid, exe, argv)
        for pid, exe, argv in processes()
        if pid not in before
        and (os.path.realpath(exe) == worker_exe or argv[:2] == ["sleep", "5"])
    ]


def fail(message):
    print(f"tokio_pool check: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) < 3:
        fail(__doc__)
    example, worker = sys.argv[1], sys.argv[2:]
    worker_exe = os.path.realpath(worker[0])
    before = {pid for pid, _, _ in processes()}
    source = "".join(snippet + "\n" for snippet, _ in SNIPPETS)
    started = time.monotonic()
    run = subprocess.run(
        [example, *worker], input=source, capture_output=True, text=True, timeout=60
    )
    elapsed = time.monotonic() - started
    if run.returncode != 0:
        fail(f"exit status {run.returncode}; stderr:\n{run.stderr}")
    lines = run.stdout.splitlines()
    if len(lines) != len(SNIPPETS) + 1:
        fail(f"expected {len(SNIPPETS) + 1} lines, got {len(lines)}:\n{run.stdout}")
    for number, ((snippet, (expected, detail)), line) in enumerate(zip(SNIPPETS, lines), 1):
        answer = json.loads(line)
        if answer.get("line") != number:
            fail(f"line {number} out of order: {line}")
        if expected == "ok":
            if answer != {"line": number, "ok": detail}:
                fail(f"{snippet!r}: expected ok {detail!r}, got {line}")
            continue
        if answer.get("class") != expected or answer.get("limit") != detail:
            fail(f"{snippet!r}: expected {expected}/{detail}, got {line}")
        if expected == "limit" and detail == "instructions" and answer["ms"] >= 200:
            fail(f"{snippet!r}: the instruction limit took {answer['ms']} ms (deadline 200)")
        if expected == "deadline" and answer["ms"] > 250:
            fail(f"{snippet!r}: the deadline kill took {answer['ms']} ms (at most 250)")
    stats = json.loads(lines[-1])
    successes = sum(1 for _, (kind, _) in SNIPPETS if kind == "ok")
    expected = {
        "invocations": len(SNIPPETS),
        "successes": successes,
        "guest_errors": 1,
        "limit_trips": 2,
        "retirements": 2,
        "timeouts": 1,
        "crashes": 0,
        "violations": 0,
        "quarantined": False,
        "failures_in_window": 1,
        "driver": "tokio",
    }
    for key, value in expected.items():
        if stats.get(key) != value:
            fail(f"stats: {key} is {stats.get(key)!r}, expected {value!r}: {lines[-1]}")
    # Every worker that ended (two trips, one deadline) was replaced, or its
    # member waits for its next call to start the fresh one.
    vacant = sum(1 for member in stats["members"] if member["state"] == "vacant")
    if stats["restarts"] + vacant != 3:
        fail(f"stats: restarts {stats['restarts']} + vacant {vacant} != 3: {lines[-1]}")
    left = leftovers(worker_exe, before)
    if left:
        fail(f"left running after the example exited: {left}")
    print(f"tokio_pool check: {len(SNIPPETS)} snippets, every line and the stats as expected, "
          f"nothing left ({elapsed:.2f} s)")


if __name__ == "__main__":
    main()
