#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the transport ops-table excerpts of the docs from transport/transport.h.

Two excerpts of the ops table: `struct papTransportCaps`, the sub-tables (`struct pap*Ops`,
the concerns) and `struct papTransportOps`, in the header's order, each between its markers:
  - docs/ARCHITECTURE.md section 5: each struct under the first sentence of its comment, its
    members as the header declares them, each group under the first sentence of its comment;
  - docs/CONVENTIONS.md section 7: a table, one row per group of members (the members
    under one comment, named as a caller reaches them from the table: `msg->isend(...)`,
    `caps.anySource`), with the comment in full as the contract.

  gen-ops.py          rewrite both excerpts
  gen-ops.py --check  exit 1 (and say which) when an excerpt is not what the header gives
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = 'transport/transport.h'
END = '<!-- end of the generated excerpt -->'


def begin(what):
    return '<!-- generated (%s) from %s by scripts/gen-ops.py: do not edit -->' % (what,
                                                                                 HEADER)


def clean(comment):
    """The text of a C comment (its /* */ stripped), on one line."""
    text_ = ' '.join(line.strip().lstrip('*').strip() for line in comment.split('\n'))
    return ' '.join(text_.split())


def structs(text):
    """[(name, comment over it, groups)] of struct papTransportCaps, the sub-tables and
    struct papTransportOps, in the header's order."""
    out = []
    for m in re.finditer(r'(?:/\*((?:(?!\*/).)*?)\*/\n)?struct (\w+) \{\n(.*?)\n\};', text, re.S):
        name = m.group(2)
        if name == 'papTransportCaps' or (name.startswith('pap') and name.endswith('Ops')):
            out.append((name, clean(m.group(1) or ''), groups(m.group(3))))
    if not any(n == 'papTransportOps' for n, _, _ in out):
        raise ValueError('%s: struct papTransportOps not found' % HEADER)
    return out


def paths(sts):
    """{struct name: how a caller reaches its members from the ops table}, from the
    members of struct papTransportOps (`const struct papMsgOps* msg;`: 'msg->')."""
    out = {'papTransportOps': ''}
    for name, _, gs in sts:
        if name != 'papTransportOps':
            continue
        for _, members in gs:
            for one, _ in members:
                m = re.match(r'(?:const )?struct (\w+)(\*?) (\w+);$', one)
                if m:
                    out[m.group(1)] = m.group(3) + ('->' if m.group(2) else '.')
    return out


def groups(body):
    """[(comments, [(declaration on one line, declaration as the header breaks it)])] of a
    struct's body, in order; comments: the text of each comment over the group."""
    out = []
    comment, members, decl = [], [], ''
    i = 0
    while i < len(body):
        if body.startswith('/*', i):
            j = body.index('*/', i) + 2
            if members:  # a comment after members opens the next group
                out.append((comment, members))
                comment, members = [], []
            comment.append(clean(body[i + 2:j - 2]))
            i = j
        elif body[i] == ';':
            one = ' '.join((decl + ';').split()).replace('( ', '(')
            members.append((one, re.sub(r'^\s*\n', '', decl).rstrip() + ';'))
            decl = ''
            i += 1
        else:
            decl += body[i]
            i += 1
    if members:
        out.append((comment, members))
    return out


def member_name(decl):
    m = re.search(r'\(\*\s*(\w+)\)', decl)
    return m.group(1) if m else re.search(r'(\w+)\s*;$', decl).group(1)


def member_call(decl):
    """name(param names) of a function pointer, the bare name of a field."""
    m = re.search(r'\(\*\s*(\w+)\)\s*\((.*)\);$', decl)
    if not m:
        return member_name(decl)
    names = []
    for p in m.group(2).split(','):
        w = re.findall(r'\w+', p)
        names.append(w[-1] if w and len(w) > 1 and w[-1] not in ('void',) else '')
    return '%s(%s)' % (m.group(1), ', '.join(n for n in names if n))


def first_sentence(s):
    m = re.match(r'(.+?[.!?])(\s+[A-Z(`]|$)', s)
    return m.group(1) if m else s


def wrap(text, first, rest, width=100):
    """text as a C comment opened by first, its lines continued by rest, closed by */."""
    words, lines, cur = text.split(), [], first
    words[-1] += ' */'
    for w in words:
        if len(cur) + len(w) + 1 > width and cur.strip() not in ('', '/*', '*'):
            lines.append(cur.rstrip())
            cur = rest
        cur += ('' if cur.endswith(' ') else ' ') + w
    lines.append(cur)
    return lines


def code_excerpt(sts):
    out = ['```c']
    for k, (name, head, gs) in enumerate(sts):
        if k:
            out.append('')
        if head:
            out += wrap(first_sentence(head), '/*', ' *')
        out.append('struct %s {' % name)
        for comment, members in gs:
            if comment:
                out += wrap(' '.join(first_sentence(c) for c in comment), '  /*', '   *')
            out += [full for _, full in members]
        out.append('};')
    out.append('```')
    return '\n'.join(out)


def table(sts):
    rows = ['| member | contract (the comment in the header) |', '|---|---|']
    where = paths(sts)
    for name, _, gs in sts:
        for comment, members in gs:
            text = ' '.join(comment).replace('|', '\\|').replace('*', '\\*')
            rows.append('| %s | %s |' % (', '.join('`%s%s`' % (where.get(name, name + ' '),
                                                                member_call(d))
                                                   for d, _ in members),
                                         text or '(no comment)'))
    return '\n'.join(rows)


def replace(doc, what, want):
    b = begin(what)
    a, e = doc.find(b), doc.find(END, doc.find(b) + 1)
    if a < 0 or e < a:
        return None
    return doc[:a] + b + '\n' + want + '\n' + doc[e:]


def main():
    with open(os.path.join(ROOT, HEADER)) as f:
        sts = structs(f.read())
    jobs = [('docs/ARCHITECTURE.md', 'code', code_excerpt(sts)),
            ('docs/CONVENTIONS.md', 'table', table(sts))]
    check = '--check' in sys.argv[1:]
    bad = 0
    for path, what, want in jobs:
        with open(os.path.join(ROOT, path)) as f:
            doc = f.read()
        new = replace(doc, what, want)
        if new is None:
            print('%s: the markers of the generated excerpt are missing (%s ... %s)'
                  % (path, begin(what), END))
            bad = 1
        elif new != doc:
            if check:
                print('%s: the ops-table excerpt is not what %s gives: run scripts/gen-ops.py'
                      % (path, HEADER))
                bad = 1
            else:
                with open(os.path.join(ROOT, path), 'w') as f:
                    f.write(new)
    if check and not bad:
        print('docs/ARCHITECTURE.md and docs/CONVENTIONS.md match %s (%d members in %d '
              'groups of %d structs)' % (HEADER, sum(len(m) for _, _, gs in sts for _, m in gs),
                                         sum(len(gs) for _, _, gs in sts), len(sts)))
    return bad


if __name__ == '__main__':
    sys.exit(main())
