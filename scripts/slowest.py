#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Where a `meson test` run spent its time.

usage: scripts/slowest.py BUILD_DIR [N]

Reads BUILD_DIR/meson-logs/testlog.json (one record per meson test: name, result, seconds,
captured output) and prints the N slowest meson tests (default 15) and the N slowest
GoogleTest cases found in their output ("[       OK ] Suite.Case (123 ms)"). Prints
nothing and exits 0 when the log is missing, so that a failed stage still gets a summary.
"""
import json
import os
import re
import sys

CASE = re.compile(r"^\[\s+(OK|FAILED|SKIPPED)\s+\] (\S+) \((\d+) ms\)$")


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    build = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    path = os.path.join(build, "meson-logs", "testlog.json")
    if not os.path.exists(path):
        return 0
    tests, cases = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            name = rec.get("name", "?")
            tests.append((float(rec.get("duration", 0.0)), name, rec.get("result", "?")))
            for out in (rec.get("stdout") or "").splitlines():
                m = CASE.match(out.strip())
                if m:
                    cases.append((int(m.group(3)) / 1000.0, m.group(2), name))
    total = sum(t[0] for t in tests)
    print(f"{len(tests)} meson tests, {total:.0f} s in all; the {min(n, len(tests))} slowest:")
    for sec, name, res in sorted(tests, reverse=True)[:n]:
        print(f"  {sec:8.1f} s  {name}  ({res})")
    if cases:
        print(f"{len(cases)} GoogleTest cases; the {min(n, len(cases))} slowest:")
        for sec, name, test in sorted(cases, reverse=True)[:n]:
            print(f"  {sec:8.1f} s  {name}  [{test}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
