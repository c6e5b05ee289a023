#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Size guard rails for the library's C and C++ code (docs/CONVENTIONS.md section 12).

No library file over FILE_LIMIT lines and no function over FUNC_LIMIT lines, except the
entries of scripts/size-allowlist.txt, which record today's oversized files and functions
with their sizes. The list may only shrink. The check fails when
  - a file or function not on the list is over its limit;
  - an entry on the list grew past its recorded size;
  - an entry is stale: its file or function shrank below its recorded size (lower the
    entry), got within the limit or is gone (remove the entry).

A file's size is its line count (`wc -l`). A function's size counts the lines from the one
naming the function to its closing brace, both included (comments and blank lines count).
Functions are found by matching braces outside comments, strings and preprocessor lines;
macro bodies are not functions.

usage: check-size.py [--root DIR] [--list]   (--list prints every size over the limits)
"""
import os
import re
import sys

FILE_LIMIT = 800
FUNC_LIMIT = 100
# The code shipped (docs/CONVENTIONS.md section 12): the host library and its drop-in and
# launcher (src/), the transports, the kernels, the public headers and the PyTorch
# extension's C++. Tests, perf binaries and scripts are not library.
LIBRARY_DIRS = ['src', 'transport', 'kernels', 'include', 'python/papccl']
SOURCE_EXTS = ('.c', '.h', '.cc', '.cpp', '.hpp', '.cu', '.cuh')
ALLOWLIST = 'scripts/size-allowlist.txt'


def library_files(root):
    out = []
    for d in LIBRARY_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(SOURCE_EXTS):
                    out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return out


def blank_noncode(text):
    """The text with comments, string and character literals and preprocessor lines
    replaced by spaces (newlines kept, so offsets and line numbers stay), and the
    conditional directives: [(offset, 'if' | 'else' | 'endif')]."""
    out = list(text)
    directives = []
    i, n = 0, len(text)
    line_start = True

    def blank(a, b):
        for k in range(a, b):
            if out[k] != '\n':
                out[k] = ' '

    while i < n:
        c = text[i]
        if line_start and c in ' \t':
            i += 1
            continue
        if line_start and c == '#':  # a preprocessor line, with its continuations
            j = i
            while j < n:
                if text[j] == '\n' and text[j - 1] != '\\':
                    break
                if text.startswith('/*', j):  # a comment inside a directive
                    e = text.find('*/', j + 2)
                    j = n if e < 0 else e + 2
                    continue
                j += 1
            m = re.match(r'#\s*(if|ifdef|ifndef|elif|else|endif)\b', text[i:j])
            if m:
                kind = m.group(1)
                directives.append((i, 'if' if kind.startswith('if') else
                                   'endif' if kind == 'endif' else 'else'))
            blank(i, j)
            i = j
            continue
        line_start = False
        if c == '\n':
            line_start = True
            i += 1
        elif text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c in '"\'':
            # A raw string literal R"d(...)d" (C++).
            m = re.match(r'R"([^ ()\\]{0,16})\(', text[i - 1:i + 20]) if c == '"' and i > 0 \
                else None
            if m and text[i - 1] == 'R':
                end = text.find(')' + m.group(1) + '"', i)
                j = n if end < 0 else end + len(m.group(1)) + 2
            else:
                j = i + 1
                while j < n and text[j] != c and text[j] != '\n':
                    j += 2 if text[j] == '\\' else 1
                j += 1
            blank(i + 1, min(j, n) - 1)
            i = j
        else:
            i += 1
    return ''.join(out), directives


NOT_NAMES = {'__launch_bounds__', '__attribute__', 'decltype', 'alignas', '__declspec'}
KEYWORDS = {'if', 'for', 'while', 'switch', 'return', 'sizeof', 'do', 'else', 'catch'}


def classify(prefix):
    """What a '{' opens, from the code since the previous ';', '{' or '}' at its level:
    ('func', name, offset of the name), ('scope', ...) for a namespace or extern "C" (its
    contents are at file level), ('body', ...) for a struct, class, union or enum, or
    ('other', ...)."""
    p = prefix.strip()
    p = re.sub(r'^(public|private|protected)\s*:', '', p).strip()
    if re.match(r'^(namespace\b|extern\s*"\s*"\s*$|inline\s+namespace\b)', p):
        return ('scope', None, None)
    if re.match(r'^(typedef\s+)?(struct|class|union|enum)\b[^()=]*$', p) or \
       re.match(r'^template\s*<.*>\s*(struct|class|union)\b[^()=]*$', p, re.S):
        return ('body', None, None)
    if '=' in re.sub(r'operator\s*[^\s(]+', '', p).split('(')[0]:
        return ('other', None, None)  # an initializer
    # The parameter list: the first top-level '(...)' that does not belong to an attribute
    # (__launch_bounds__(n), __attribute__((...)), decltype(...) in a return type).
    depth = 0
    for k, ch in enumerate(p):
        if ch == '(':
            if depth == 0:
                head = p[:k].rstrip()
                m = re.search(r'(~?[A-Za-z_][A-Za-z_0-9]*(?:\s*::\s*~?[A-Za-z_][A-Za-z_0-9]*)*'
                              r'|operator\s*[^\s(]+|operator\s*\(\s*\))\s*$', head)
                if m and m.group(1) not in NOT_NAMES:
                    name = re.sub(r'\s+', '', m.group(1))
                    if name.split('::')[-1] in KEYWORDS:
                        return ('other', None, None)
                    return ('func', name, m.start(1))
            depth += 1
        elif ch == ')':
            depth -= 1
    return ('other', None, None)


def functions(text):
    """[(name, first line, last line)] of the function definitions in text."""
    code, directives = blank_noncode(text)
    directives = dict(directives)
    found = []
    # Stack of what each open brace is: 'scope' (file level continues inside), 'body'
    # (declarations), 'func' (a function body) or 'other'.
    stack = []
    stmt_start = 0  # offset where the current declaration began, at declaration level
    func_depth = None
    # Conditional compilation: each branch of an #if starts from the state at the #if, and
    # the parse goes on after #endif from the state at the end of the first branch.
    conds = []  # [saved state at #if, state at the end of the first branch or None]
    for i, ch in enumerate(code):
        d = directives.get(i)
        if d == 'if':
            conds.append([(list(stack), stmt_start, func_depth), None])
        elif d == 'else' and conds:
            if conds[-1][1] is None:
                conds[-1][1] = (list(stack), stmt_start, func_depth)
            stack, stmt_start, func_depth = list(conds[-1][0][0]), *conds[-1][0][1:]
        elif d == 'endif' and conds:
            _, first = conds.pop()
            if first is not None:
                stack, stmt_start, func_depth = first
        if ch == '{':
            if func_depth is None and (not stack or stack[-1][0] in ('scope', 'body')):
                kind, name, off = classify(code[stmt_start:i])
                if kind == 'func':
                    lead = len(code[stmt_start:i]) - len(code[stmt_start:i].lstrip())
                    pstart = stmt_start + lead
                    # offset of the name within the stripped prefix -> absolute offset
                    stripped = code[pstart:i]
                    stripped_ws = stripped.strip()
                    acc = re.match(r'^(public|private|protected)\s*:\s*', stripped_ws)
                    base = pstart + (acc.end() if acc else 0)
                    start_line = code.count('\n', 0, base + off) + 1
                    stack.append(('func', name, start_line))
                    func_depth = len(stack)
                else:
                    stack.append((kind, None, None))
            else:
                stack.append(('other', None, None))
            stmt_start = i + 1
        elif ch == '}':
            if not stack:
                raise ValueError('unbalanced } at line %d' % (code.count('\n', 0, i) + 1))
            kind, name, start_line = stack.pop()
            if func_depth is not None and len(stack) + 1 == func_depth:
                found.append((name, start_line, code.count('\n', 0, i) + 1))
                func_depth = None
            stmt_start = i + 1
        elif ch == ';':
            stmt_start = i + 1
        elif ch == ':' and func_depth is None and stack and stack[-1][0] == 'body':
            if re.search(r'\b(public|private|protected)\s*$', code[stmt_start:i]):
                stmt_start = i + 1
    if stack:
        raise ValueError('%d unclosed {' % len(stack))
    return found


def measure(root):
    """{key: size} of every file and function over its limit, and the parse errors."""
    sizes, errors = {}, []
    for path in library_files(root):
        with open(os.path.join(root, path), encoding='utf-8', errors='replace') as f:
            text = f.read()
        lines = text.count('\n') + (0 if text.endswith('\n') or not text else 1)
        sizes[path] = lines
        try:
            funcs = functions(text)
        except ValueError as e:
            errors.append('%s: cannot find its functions: %s' % (path, e))
            continue
        seen = {}
        for name, a, b in funcs:
            key = '%s:%s' % (path, name)
            if key in seen:  # the same name twice (#if branches): the larger counts
                key_size = max(seen[key], b - a + 1)
            else:
                key_size = b - a + 1
            seen[key] = key_size
        sizes.update(seen)
    return sizes, errors


def limit_of(key):
    return FUNC_LIMIT if ':' in key else FILE_LIMIT


def read_allowlist(path):
    entries, errors = {}, []
    with open(path) as f:
        for no, line in enumerate(f, 1):
            s = line.split('#', 1)[0].strip()
            if not s:
                continue
            parts = s.split()
            if len(parts) != 2 or not parts[1].isdigit():
                errors.append('%s:%d: want "PATH LINES" or "PATH:FUNCTION LINES", got %r'
                              % (path, no, line.rstrip('\n')))
                continue
            if parts[0] in entries:
                errors.append('%s:%d: %s is listed twice' % (path, no, parts[0]))
            entries[parts[0]] = int(parts[1])
    return entries, errors


def describe(key):
    if ':' in key:
        path, func = key.split(':', 1)
        return 'function %s (%s)' % (func, path)
    return 'file %s' % key


def main(argv):
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    if '--root' in argv:
        root = argv[argv.index('--root') + 1]
    sizes, errors = measure(root)
    if '--list' in argv:
        for e in errors:
            print('check-size: ' + e)
        for key in sorted(sizes, key=lambda k: (':' in k, k)):
            if sizes[key] > limit_of(key):
                print('%s %d' % (key, sizes[key]))
        return 1 if errors else 0
    allow_path = os.path.join(root, ALLOWLIST)
    allowed, list_errors = read_allowlist(allow_path)
    errors += list_errors
    for key, size in sorted(sizes.items()):
        limit = limit_of(key)
        if size <= limit:
            continue
        if key not in allowed:
            errors.append('%s has %d lines, over the limit of %d: split it (%s may only '
                          'shrink)' % (describe(key), size, limit, ALLOWLIST))
        elif size > allowed[key]:
            errors.append('%s has %d lines, more than the %d that %s allows (limit %d): '
                          'it may only shrink' % (describe(key), size, allowed[key],
                                                  ALLOWLIST, limit))
    for key, recorded in sorted(allowed.items()):
        size = sizes.get(key)
        limit = limit_of(key)
        if size is None:
            errors.append('%s: %s is gone: remove its entry' % (ALLOWLIST, describe(key)))
        elif size <= limit:
            errors.append('%s: %s has %d lines, within the limit of %d: remove its entry'
                          % (ALLOWLIST, describe(key), size, limit))
        elif size < recorded:
            errors.append('%s: %s has %d lines, fewer than the recorded %d: lower the entry '
                          'to %d' % (ALLOWLIST, describe(key), size, recorded, size))
    nfiles = sum(1 for k in sizes if ':' not in k)
    nfuncs = len(sizes) - nfiles
    if errors:
        for e in errors:
            print('check-size: ' + e)
        print('check-size: FAILED (%d problems; limits: %d lines a library file, %d a '
              'function; docs/CONVENTIONS.md section 12)' % (len(errors), FILE_LIMIT,
                                                             FUNC_LIMIT))
        return 1
    print('check-size: %d library files and %d functions within the limits (%d lines a '
          'file, %d a function) or their allowlist entries (%d)'
          % (nfiles, nfuncs, FILE_LIMIT, FUNC_LIMIT, len(allowed)))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
