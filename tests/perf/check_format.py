#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks a perf binary's stdout against nccl-tests' output layout (the printf formats of
nccl-tests 2.19.6: header, device lines, the three table header lines byte for byte, rows,
footer). papccl's own comment lines ("# papccl ...", "# Arrival pattern ...", "# tail = ...")
are allowed where nccl-tests prints its optional lines. Usage: check_format.py BINARY_NAME
[--arrival] < output. Exit 0 if the layout matches, 1 with the first mismatch otherwise."""
import re
import sys

name = sys.argv[1]
arrival = "--arrival" in sys.argv
lines = sys.stdin.read().split("\n")
i = 0


def fail(msg):
    print(f"check_format: line {i + 1}: {msg}\n  got: {lines[i] if i < len(lines) else '<eof>'!r}")
    sys.exit(1)


def expect(regex, what):
    global i
    if i >= len(lines) or not re.fullmatch(regex, lines[i]):
        fail(f"expected {what} /{regex}/")
    i += 1


def skip_extensions():
    global i
    while i < len(lines) and re.match(r"# (papccl |Arrival pattern|tail = |Blocking Enabled|"
                                      r"Parallel Init|-G |-I )", lines[i]):
        i += 1


NUM7 = r"[ 0-9.e+-]{7}"
NUM6 = r"[ 0-9.e+-]{6}"
expect(r"# nccl-tests version 2\.19\.6 nccl-headers=\d+ nccl-library=\d+", "the version line")
skip_extensions()
expect(r"# Collective test starting: " + re.escape(name), "the starting line")
expect(r"# nThread \d+ nGpus \d+ minBytes \d+ maxBytes \d+ step: \d+\((factor|bytes)\) warmup "
       r"iters: \d+ iters: \d+ agg iters: \d+ validation: \d+ graph: \d+ unalign: \d+",
       "the parameters line")
skip_extensions()
expect(r"#", "a lone #")
expect(r"# Using devices", "the devices title")
nrank = 0
while i < len(lines) and lines[i].startswith("#  Rank"):
    expect(r"#  Rank [ \d]\d Group [ \d]\d Pid [ \d]{5}\d on [ \S]{10,} device [-\d ]{2} .*",
           "a device line")
    nrank += 1
if nrank == 0:
    fail("no device lines")
if i < len(lines) and lines[i] == "#" and i + 1 < len(lines) and lines[i + 1].startswith(
        "# Reducing maxBytes"):
    i += 2
expect(r"#", "the lone # before the table")
if arrival:
    expect(r"#\s+out-of-place\s+in-place\s*", "the placement title")
    expect(r"#\s+size\s+count\s+type\s+redop\s+root\s+time\s+algbw\s+busbw\s+#wrong\s+tail\s+"
           r"inColl\s+skew\s+time\s+algbw\s+busbw\s+#wrong\s+tail\s+inColl\s+skew", "columns")
    expect(r"#\s+\(B\)\s+\(elements\).*", "units")
else:
    # Byte for byte, trailing blanks included (NCCL-COMPAT 1.3).
    for want in [
            "#                                                              out-of-place      "
            "                 in-place          ",
            "#       size         count      type   redop    root     time   algbw   busbw  #wro"
            "ng     time   algbw   busbw  #wrong ",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)      "
            "       (us)  (GB/s)  (GB/s)         "]:
        if i >= len(lines) or lines[i] != want:
            fail(f"expected the table header line {want!r}")
        i += 1
half = rf"  {NUM7}  {NUM6}  {NUM6}  (?:[ 0-9.e+-]{{6}}|  N/A)"
if arrival:
    half += rf"  {NUM7}  {NUM7}  {NUM7}"
row = rf"[ \d]{{11}}\d  [ \d]{{11}}\d  [ \w]{{8}}  [ \w]{{6}}  [-\d ]{{6}}{half}{half}"
rows = 0
while i < len(lines) and not lines[i].startswith("#"):
    if lines[i] == "":
        fail("an empty line inside the table")
    expect(row, "a result row")
    rows += 1
if rows == 0:
    fail("no result rows")
expect(r"# Out of bounds values : \d+ (OK|FAILED)", "the out-of-bounds footer")
expect(r"# Avg bus bandwidth    : [0-9.e+-]+ ", "the bandwidth footer")
expect(r"#", "a lone #")
expect(r"# Collective test concluded: " + re.escape(name), "the concluded line")
expect(r"#", "a lone #")
expect(r"", "the final empty line")
print(f"check_format: {name}: layout OK ({nrank} ranks, {rows} rows)")
