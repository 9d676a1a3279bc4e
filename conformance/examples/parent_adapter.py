#!/usr/bin/env python3
"""Parent adapter: certify a host whose interface is not the suite's.

The parent suite (SPEC.md §19, conformance/README.md "A parent") runs

    ADAPTER --wall-time-ms W [--allow-process] [--grant CAP]... eval SOURCE

with QUIRL_LUA_WORKER naming the worker command to use. A host written in
another language rarely has exactly this command line, so it is certified
through a small adapter like this one, which translates the call into the
host's own interface and the host's answer back into the contract:

- the result as one JSON value on stdout and exit 0 on success;
- otherwise exit 1 (guest error), 3 (resource limit), 4 (worker failure or
  protocol violation) or 5 (unavailable), with the v1 error code named on
  stderr as `error[CODE]: message`.

The host here is a stand-in with a JSON-lines interface: `quirl-lua batch`
(one operation object per input line, one `{"ok":…}` line per answer), taken
from ADAPTER_HOST (default `quirl-lua` on PATH). To adapt another host,
replace `host_command` and `translate`; the timing and cleanup duties of
the contract stay with the host (the adapter only waits for it).

    quirl-conformance parent -- python3 conformance/examples/parent_adapter.py
"""

import json
import os
import shlex
import subprocess
import sys

# The host's failure kinds -> the contract's exit classes (a guest error
# with code resource_limit is a limit, class 3).
EXIT_CLASSES = {"guest": 1, "deadline": 3, "cancelled": 3, "overloaded": 3,
                "unavailable": 5, "quarantined": 5}


def parse(argv):
    """The suite's command line: options, then `eval SOURCE`."""
    options = {"wall_time_ms": None, "allow_process": False, "grants": []}
    args = list(argv)
    while args and args[0] != "eval":
        flag = args.pop(0)
        if flag == "--wall-time-ms" and args:
            options["wall_time_ms"] = args.pop(0)
        elif flag == "--allow-process":
            options["allow_process"] = True
        elif flag == "--grant" and args:
            options["grants"].append(args.pop(0))
        else:
            raise SystemExit(usage(f"unknown argument {flag!r}"))
    if len(args) != 2 or options["wall_time_ms"] is None:
        raise SystemExit(usage("expected --wall-time-ms W … eval SOURCE"))
    return options, args[1]


def usage(message):
    sys.stderr.write(f"parent_adapter: {message}\n")
    return 2


def host_command(options):
    """How the host is started: its own flags, its own worker option."""
    host = shlex.split(os.environ.get("ADAPTER_HOST", "quirl-lua"))
    command = host + ["--wall-time-ms", options["wall_time_ms"]]
    worker = os.environ.get("QUIRL_LUA_WORKER")
    if worker:
        command += ["--worker", worker]
    if options["allow_process"]:
        command.append("--allow-process")
    for grant in options["grants"]:
        command += ["--grant", grant]
    return command + ["batch"]


def translate(answer_line, host_status):
    """The host's answer -> (stdout text, stderr text, exit status)."""
    try:
        answer = json.loads(answer_line)
    except ValueError:
        return "", "error[lua]: the host gave no answer\n", host_status or 4
    if answer.get("ok") is True:
        return json.dumps(answer.get("result"), separators=(",", ":")) + "\n", "", 0
    error = answer.get("error")
    code = error.get("code", "lua") if isinstance(error, dict) else "validation"
    message = error.get("message", "") if isinstance(error, dict) else str(error)
    status = EXIT_CLASSES.get(answer.get("kind"), 4)
    if answer.get("kind") == "guest" and code == "resource_limit":
        status = 3
    return "", f"error[{code}]: {message}\n", status


def main():
    options, source = parse(sys.argv[1:])
    request = json.dumps({"op": "eval", "source": source}) + "\n"
    try:
        host = subprocess.run(host_command(options), input=request.encode(),
                              stdout=subprocess.PIPE, check=False)
    except OSError as error:
        sys.stderr.write(f"error[lua]: cannot start the host: {error}\n")
        return 5
    lines = host.stdout.decode("utf-8", "replace").splitlines()
    out, err, status = translate(lines[0] if lines else "", host.returncode)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return status


if __name__ == "__main__":
    sys.exit(main())
