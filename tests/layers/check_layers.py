#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layer graph, checked against the build (docs/ARCHITECTURE.md).

Each layer of the library is a static library whose include path holds its own folder and
those of the layers below it. For every layer this preprocesses, with the include path of
one of its real compile commands (compile_commands.json), a file that includes each header
of every other layer, and so learns which layers it can see. It fails when
  - two layers see each other (a cycle), or the relation has any cycle;
  - the order differs from the one below (the documented order);
  - the upward include it shows (the engine including the communicator) compiles.
Usage: check_layers.py SOURCE_ROOT BUILD_DIR
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile

# Bottom up; a layer may include the layers listed after it (its lower layers), nothing else.
LAYERS = {
    'core': ('src/core', []),
    'kernels': ('kernels', ['core']),
    'bootstrap': ('src/bootstrap', ['core']),
    'transport': ('transport', ['core']),
    'engine': ('src/engine', ['transport', 'kernels', 'core']),
    'algo': ('src/algo', ['engine', 'transport', 'kernels', 'core']),
    'comm': ('src/comm', ['algo', 'engine', 'transport', 'kernels', 'core']),
    'arrival': ('src/arrival', ['comm', 'algo', 'engine', 'transport', 'kernels', 'core']),
    'enqueue': ('src/enqueue', ['arrival', 'comm', 'algo', 'engine', 'transport', 'kernels', 'core']),
    'cuda': ('src/cuda', ['enqueue', 'arrival', 'comm', 'algo', 'engine', 'transport', 'kernels',
                          'core', 'bootstrap']),
    'api': ('src/api', ['cuda', 'enqueue', 'arrival', 'comm', 'algo', 'engine', 'transport',
                        'kernels', 'core', 'bootstrap']),
}
HEADER_ONLY = {'comm'}  # no sources: its view is its includers' (checked through them)


def main():
    src, build = sys.argv[1], sys.argv[2]
    with open(os.path.join(build, 'compile_commands.json')) as f:
        cmds = json.load(f)
    headers = {}
    for name, (folder, _) in LAYERS.items():
        d = os.path.join(src, folder)
        headers[name] = sorted(h for h in os.listdir(d) if h.endswith('.h'))
    # One real compile command per layer with sources.
    argv = {}
    for c in cmds:
        out = c.get('output', '') or c['command']
        for name, (folder, _) in LAYERS.items():
            lib = 'libpapccl_%s.a.p' % name
            if name not in argv and lib in c['command'] and c['file'].endswith('.c'):
                argv[name] = (shlex.split(c['command']), c['directory'])
    failures = []
    sees = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in LAYERS:
            if name in HEADER_ONLY:
                continue
            if name not in argv:
                failures.append('no compile command for layer %s (is it built?)' % name)
                continue
            args, cwd = argv[name]
            # Keep the compiler, defines and include paths; preprocess a probe instead.
            keep = [args[0]] + [a for a in args[1:] if a.startswith(('-I', '-D', '-std'))]
            seen = set()
            for other in LAYERS:
                if other == name:
                    continue
                ok = True
                for h in headers[other]:
                    probe = os.path.join(tmp, 'probe.c')
                    with open(probe, 'w') as f:
                        f.write('#include "%s"\n' % h)
                    r = subprocess.run(keep + ['-E', probe, '-o', os.devnull], cwd=cwd,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    if r.returncode != 0:
                        ok = False
                        break
                if ok:
                    seen.add(other)
            sees[name] = seen
            allowed = set(LAYERS[name][1])
            extra = seen - allowed
            if extra:
                failures.append('layer %s can include %s, above or beside it' %
                                (name, ', '.join(sorted(extra))))
    # Cycles in what the build lets each layer see.
    for a, seen in sees.items():
        for b in seen:
            if a in sees.get(b, ()):
                failures.append('cycle: %s and %s include each other' % (a, b))
    # The upward include shown: the engine's compile command cannot see the communicator.
    if 'engine' in sees and 'comm' in sees['engine']:
        failures.append('the engine can include comm.h')
    for name in sorted(sees):
        print('%-9s sees %s' % (name, ', '.join(sorted(sees[name])) or '(none)'))
    if 'engine' in argv:
        args, cwd = argv['engine']
        keep = [args[0]] + [a for a in args[1:] if a.startswith(('-I', '-D', '-std'))]
        with tempfile.TemporaryDirectory() as tmp:
            probe = os.path.join(tmp, 'upward.c')
            with open(probe, 'w') as f:
                f.write('#include "engine.h"\n#include "comm.h"\n')
            r = subprocess.run(keep + ['-fsyntax-only', probe], cwd=cwd, capture_output=True,
                               text=True)
            line = (r.stderr.strip().splitlines() or ['(compiled)'])[0]
            print('upward include (engine -> comm.h): %s' %
                  ('fails: ' + line if r.returncode != 0 else 'COMPILES'))
    for f in failures:
        print('FAIL: ' + f)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
