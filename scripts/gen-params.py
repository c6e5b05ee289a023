#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the table of docs/PARAMETERS.md from the parameter registry (src/core/param.h).

  gen-params.py          rewrite the table between the markers
  gen-params.py --check  exit 1 (and say so) when the table is not what the registry gives
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, 'src', 'core', 'param.h')
DOC = os.path.join(ROOT, 'docs', 'PARAMETERS.md')
BEGIN = '<!-- generated from src/core/param.h by scripts/gen-params.py: do not edit -->'
END = '<!-- end of the generated table -->'


def lists(text):
    """{list name: [argument lists]} of every PAP_PARAM_*_LIST X-macro."""
    out = {}
    for m in re.finditer(r'#define (PAP_PARAM_\w+_LIST)\(X\)((?:.*\\\n)+.*)', text):
        body = m.group(2).replace('\\\n', ' ')
        entries = []
        for x in re.finditer(r'X\(((?:[^()"]|"(?:[^"\\]|\\.)*")*)\)', body):
            args, cur, inq, i = [], '', False, 0
            s = x.group(1)
            while i < len(s):
                c = s[i]
                if c == '"' and (i == 0 or s[i - 1] != '\\'):
                    inq = not inq
                if c == ',' and not inq:
                    args.append(cur.strip())
                    cur = ''
                else:
                    cur += c
                i += 1
            args.append(cur.strip())
            entries.append(args)
        out[m.group(1)] = entries
    return out


def text_of(arg):
    """A C argument as text: adjacent string literals joined, NULL = unset."""
    if arg == 'NULL':
        return None
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', arg)
    if not parts:
        return arg.rstrip('LlUu')
    return ''.join(parts).replace('\\"', '"').replace('\\\\', '\\')


def table(text):
    ls = lists(text)
    rows = ['| variable | default | meaning |', '|---|---|---|']
    for env, default, doc in ls['PAP_PARAM_LOG_LIST']:
        d = text_of(default)
        rows.append('| `%s` | %s | %s |' % (text_of(env), '`%s`' % d if d != 'stderr' else d,
                                           text_of(doc)))
    for _getter, env, default, _lo, _hi, doc in ls['PAP_PARAM_INT_LIST']:
        rows.append('| `%s` | `%s` | %s |' % (text_of(env), text_of(default), text_of(doc)))
    for _getter, env, default, doc in ls['PAP_PARAM_STR_LIST']:
        d = text_of(default)
        rows.append('| `%s` | %s | %s |' % (text_of(env), 'unset' if d is None else '`%s`' % d,
                                           text_of(doc)))
    return '\n'.join(rows)


def main():
    with open(HEADER) as f:
        want = table(f.read())
    with open(DOC) as f:
        doc = f.read()
    a, b = doc.find(BEGIN), doc.find(END)
    if a < 0 or b < a:
        print('%s: the markers of the generated table are missing' % DOC)
        return 1
    new = doc[:a] + BEGIN + '\n' + want + '\n' + doc[b:]
    if '--check' in sys.argv[1:]:
        if new != doc:
            print('docs/PARAMETERS.md is not what src/core/param.h gives: run '
                  'scripts/gen-params.py')
            return 1
        print('docs/PARAMETERS.md matches src/core/param.h (%d rows)' % (want.count('\n') - 1))
        return 0
    with open(DOC, 'w') as f:
        f.write(new)
    return 0


if __name__ == '__main__':
    sys.exit(main())
