#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The docs name only what the tree has.

Reads README.md, docs/*.md, perf/README.md and src/algo/README.md; in their inline code
spans (`...`, not fenced blocks) it takes
  - identifiers: names with the project's prefixes (papccl*, pap*, PAP_*, PAPCCL_*, the
    drop-in's nccl* and pnccl*) and any other camelCase or snake_case name (`ucxInit`,
    `rank_at`); `NAME*` and `NAME<...>` stand for names that begin with NAME;
  - files and folders: spans with a '/' or a known extension (`src/core/wait.h`,
    `wait.h`, `tests/layers/`);
and the targets of relative Markdown links. It fails naming the document, the line and the
name when the tree lacks one: an identifier must occur as a word in some file of the tree
other than Markdown (sources, build files, scripts; a PAPCCL_* variable thus in the
parameter registry or the code that reads it); a path must exist from the root or the
document's folder, or end some path of the tree (`shm/shm.c`, `comm/op.h`).

Names that are deliberately not in the tree (NVIDIA NCCL's, PyTorch's, build outputs,
historical names said to be gone) are in EXCEPTIONS below, each with its reason.

usage: check-docs.py [--root DIR]
"""
import os
import re
import sys

SELF = 'scripts/check-docs.py'
DOCS = ['README.md', 'perf/README.md', 'src/algo/README.md']
DOC_DIRS = ['docs']
# Folders that are no part of the tree's text (build outputs, caches, fuzzer inputs).
SKIP_DIRS = {'.git', '__pycache__', 'corpus', 'subprojects'}
EXTS = ('.c', '.h', '.cc', '.cpp', '.hpp', '.cu', '.cuh', '.py', '.sh', '.md', '.txt',
        '.build', '.map', '.toml', '.json', '.supp', '.png', '.cfg', '.yaml', '.yml')

# name: why the tree need not have it.
EXCEPTIONS = {
    'bin/': 'the folder of the installed wheel that holds papcclrun, not one of the tree',
    'nccl_device.h': 'NVIDIA NCCL\'s device-API header, which papccl does not ship',
    'train.py': 'the user\'s own training script in a torchrun command line',
    'papRedSum_f32': 'made by token pasting in kernels/reduce_ops.h (papRed<Name>_<name>)',
}

IDENT = r'[A-Za-z_][A-Za-z0-9_]*'
PROJECT = re.compile(r'^(papccl|pap[A-Z]|PAP_|PAPCCL_|nccl[A-Z]|pnccl[A-Z]|NCCL_)')
CAMEL = re.compile(r'^[a-z][a-z0-9]*[A-Z]')


def tree_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not
                             (rel == '.' and d.startswith('build')) and d != '.library')
        for f in sorted(filenames):
            yield os.path.normpath(os.path.join(rel, f))


def doc_files(root):
    out = [d for d in DOCS if os.path.exists(os.path.join(root, d))]
    for d in DOC_DIRS:
        out += sorted(os.path.join(d, f) for f in os.listdir(os.path.join(root, d))
                      if f.endswith('.md'))
    return out


def tree_index(root):
    """The tree's paths (files and folders) and the words of its non-Markdown files."""
    paths, words = set(), set()
    for rel in tree_files(root):
        paths.add(rel)
        d = os.path.dirname(rel)
        while d:
            paths.add(d + '/')
            d = os.path.dirname(d)
        if rel.endswith('.md') or rel == SELF:
            continue  # the docs themselves, and this file's list of exceptions
        try:
            with open(os.path.join(root, rel), encoding='utf-8', errors='ignore') as f:
                words.update(re.findall(IDENT, f.read()))
        except OSError:
            pass
    return paths, words


def spans(text):
    """(line, span) of each inline code span outside fenced blocks."""
    out = []
    fenced = False
    for no, line in enumerate(text.split('\n'), 1):
        if line.lstrip().startswith('```'):
            fenced = not fenced
            continue
        if fenced:
            continue
        for m in re.finditer(r'(`+)(.+?)\1', line):
            out.append((no, m.group(2).strip()))
    return out


def links(text):
    out = []
    for no, line in enumerate(text.split('\n'), 1):
        for m in re.finditer(r'\]\(([^)\s]+)\)', line):
            target = m.group(1).split('#', 1)[0]
            if target and not re.match(r'^[a-z]+:', target):
                out.append((no, target))
    return out


def identifiers(span):
    """(name, is_prefix) for the names in a span that the check holds to the tree."""
    out = []
    for m in re.finditer(r'(?<![\w$./-])(%s)(\*|<|\.\.\.)?' % IDENT, span):
        name, tail = m.group(1), m.group(2)
        if span[m.end(1):m.end(1) + 1] in ('/', '.') and re.match(r'[\w/.]', span[m.end(1) + 1:
                                                                            m.end(1) + 2]):
            continue  # part of a path or of a file name
        if m.start() > 0 and span[m.start() - 1] in '=@:':
            continue  # a value (PAPCCL_FAULT=kill@chunk)
        if not (PROJECT.match(name) or CAMEL.match(name)):
            continue
        out.append((name, tail is not None or name.endswith('_')))
    return out


def paths_in(span, top):
    out = []
    for tok in re.split(r'[\s,;()`\'"]+', span):
        tok = tok.rstrip(':')
        if tok.endswith('.') and not tok.endswith('/..'):
            tok = tok.rstrip('.')
        if not tok or tok.startswith(('/', '$', '~', '-', 'http', '%', 'build/', 'build-')):
            continue
        if '=' in tok or '*' in tok or '<' in tok or '{' in tok or '@' in tok:
            continue
        if not re.match(r'^[\w.+-]+(/[\w.+-]*)*$', tok) or tok.startswith('.'):
            continue
        if any(re.match(r'^[A-Z][A-Z0-9_-]*$', c) for c in tok.split('/')[:-1]) or \
           ('/' in tok and re.match(r'^[A-Z][A-Z0-9_-]*$', tok.split('/')[-1])):
            continue  # a placeholder (OUT/table.md, corpus/NAME/)
        if tok.endswith(EXTS) or ('/' in tok and (tok.split('/')[0] in top or
                                                   re.match(r'^[^/]+/$', tok))):
            out.append(tok)
    return out


def path_exists(tok, doc, paths):
    t = tok.lstrip('./') if tok.startswith('./') else tok
    cands = [os.path.normpath(t), os.path.normpath(os.path.join(os.path.dirname(doc), t))]
    for c in cands:
        if c in paths or c + '/' in paths:
            return True
        # A program built from one source (perf/wait_cost: perf/wait_cost.c).
        if any(c + e in paths for e in ('.c', '.cc', '.cpp', '.py', '.sh')):
            return True
    tail = '/' + t.rstrip('/')
    return any(p.rstrip('/').endswith(tail) or p.rstrip('/') == t.rstrip('/') for p in paths)


def main(argv):
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    if '--root' in argv:
        root = argv[argv.index('--root') + 1]
    paths, words = tree_index(root)
    top = {p.rstrip('/') for p in paths if '/' not in p.rstrip('/')}
    sorted_words = sorted(words)
    problems = []
    checked = set()
    for doc in doc_files(root):
        with open(os.path.join(root, doc), encoding='utf-8') as f:
            text = f.read()
        for no, span in spans(text):
            if span.startswith(('build/', 'build-')):
                continue  # build outputs
            for name, is_prefix in identifiers(span):
                checked.add(name)
                if name in EXCEPTIONS or name in words:
                    continue
                if is_prefix:
                    import bisect
                    k = bisect.bisect_left(sorted_words, name)
                    if k < len(sorted_words) and sorted_words[k].startswith(name):
                        continue
                problems.append('%s:%d: `%s` names %s%s, which the tree lacks'
                                % (doc, no, span, name, '...' if is_prefix else ''))
            for tok in paths_in(span, top):
                checked.add(tok)
                if tok in EXCEPTIONS or path_exists(tok, doc, paths):
                    continue
                problems.append('%s:%d: `%s` names the file or folder %s, which the tree '
                                'lacks' % (doc, no, span, tok))
        for no, target in links(text):
            if not path_exists(os.path.normpath(os.path.join(os.path.dirname(doc), target)),
                               '', paths):
                problems.append('%s:%d: the link to %s leads nowhere' % (doc, no, target))
    unused = sorted(set(EXCEPTIONS) - checked)
    for name in unused:
        problems.append('scripts/check-docs.py: the exception %s is named by no document: '
                        'remove it' % name)
    if problems:
        for p in problems:
            print('check-docs: ' + p)
        print('check-docs: FAILED (%d problems): fix the document, or, for a name that is '
              'deliberately not in the tree, add it with its reason to EXCEPTIONS in '
              'scripts/check-docs.py' % len(problems))
        return 1
    print('check-docs: %d documents name %d identifiers and paths, all in the tree'
          % (len(doc_files(root)), len(checked)))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
