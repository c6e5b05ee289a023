#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Commit subjects are at most 72 characters (docs/CONVENTIONS.md section 12).

usage: scripts/check-subjects.py [BASE] [--max N] [--self-test]

Checks the subject of every commit in BASE..HEAD (`git log --format=%s`), merges included,
and prints each one that is too long. BASE defaults to FLOOR below. Exit 0 when every
subject fits or when there is no history to check (said on stdout), 1 when one is too long,
2 on a usage error. In a shallow clone without BASE every commit present is newer than BASE
(HEAD's history reaches BASE only through the missing part), so those are checked.
--self-test runs the check on made-up repositories (meson test check-subjects).
"""
import os
import subprocess
import sys
import tempfile

# The last commit before the rule was checked mechanically: the history up to it has longer
# subjects, which are not rewritten (that would change every hash after them).
FLOOR = "6f0927f"
MAX = 72


def git(args, cwd=None):
    r = subprocess.run(["git"] + args, cwd=cwd, capture_output=True, encoding="utf-8",
                       errors="replace")
    return r.returncode, r.stdout


def check(base, limit, cwd=None):
    """Returns (exit code, lines to print)."""
    code, top = git(["rev-parse", "--show-toplevel"], cwd)
    if code != 0:
        return 0, ["check-subjects: skipped: not a git work tree (no history to check)"]
    code, _ = git(["rev-parse", "--verify", "-q", "HEAD^{commit}"], cwd)
    if code != 0:
        return 0, ["check-subjects: skipped: no commit yet"]
    have_base = git(["rev-parse", "--verify", "-q", base + "^{commit}"], cwd)[0] == 0
    shallow = git(["rev-parse", "--is-shallow-repository"], cwd)[1].strip() == "true"
    if have_base:
        span, what = [base + "..HEAD"], "commits after " + base
    elif shallow:
        span, what = ["HEAD"], "every commit of this shallow clone (%s is not in it)" % base
    else:
        return 0, ["check-subjects: skipped: %s is not in this history (another repository "
                   "or a rewritten one): nothing to compare with; pass a BASE" % base]
    code, out = git(["log", "--format=%h %s"] + span, cwd)
    if code != 0:
        return 0, ["check-subjects: skipped: git log %s failed (history absent)" % span[0]]
    bad, n = [], 0
    for line in out.splitlines():
        n += 1
        sha, _, subject = line.partition(" ")
        if len(subject) > limit:
            bad.append("  %s (%d characters): %s" % (sha, len(subject), subject))
    if not bad:
        return 0, ["check-subjects: %d subjects of %s fit in %d characters" % (n, what, limit)]
    return 1, (["check-subjects: %d of %d subjects of %s are longer than %d characters "
                "(docs/CONVENTIONS.md section 12; reword with git rebase -i):" %
                (len(bad), n, what, limit)] + bad)


def self_test():
    code, _ = git(["--version"])
    if code != 0:
        print("check-subjects self-test: skipped: git is not installed")
        return 77
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", GIT_CONFIG_NOSYSTEM="1", HOME=tempfile.gettempdir())
    failures = []

    def expect(name, got, want):
        if got != want:
            failures.append("%s: exit %d, wanted %d" % (name, got, want))

    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "src")

        def run(*args, cwd=src):
            subprocess.run(["git"] + list(args), cwd=cwd, env=env, check=True,
                           capture_output=True)

        os.makedirs(src)
        run("init", "-q")
        run("commit", "-q", "--allow-empty", "-m", "init")
        run("commit", "-q", "--allow-empty", "-m", "x" * 100)  # before the base: not checked
        run("tag", "base")
        run("commit", "-q", "--allow-empty", "-m", "a: " + "y" * 69)  # 72: fits
        expect("72 characters after the base", check("base", MAX, src)[0], 0)
        expect("a long one before the base, counted", check("base~1", MAX, src)[0], 1)
        run("commit", "-q", "--allow-empty", "-m", "a: " + "\u00e9" * 69 + "\n\nbody")
        expect("72 characters in 141 bytes", check("base", MAX, src)[0], 0)
        run("commit", "-q", "--allow-empty", "-m", "a: " + "y" * 70)
        expect("73 characters", check("base", MAX, src)[0], 1)
        expect("a base the history lacks", check("0" * 40, MAX, src)[0], 0)
        shallow = os.path.join(d, "shallow")
        run("clone", "-q", "--depth", "1", "file://" + src, shallow, cwd=d)
        expect("shallow clone, long subject present", check("base", MAX, shallow)[0], 1)
        expect("not a work tree", check("base", MAX, d)[0], 0)
    for f in failures:
        print("check-subjects self-test FAILED: " + f)
    if not failures:
        print("check-subjects self-test: every case passed")
    return 1 if failures else 0


def main(argv):
    base, limit = FLOOR, MAX
    args = list(argv)
    if "--self-test" in args:
        return self_test()
    if "--max" in args:
        i = args.index("--max")
        if i + 1 >= len(args) or not args[i + 1].isdigit():
            print(__doc__)
            return 2
        limit = int(args[i + 1])
        del args[i:i + 2]
    if len(args) > 1 or (args and args[0].startswith("-")):
        print(__doc__)
        return 2
    if args:
        base = args[0]
    code, lines = check(base, limit)
    print("\n".join(lines))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
