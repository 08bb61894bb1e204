#!/usr/bin/env python3
"""qemu_profile.py — where the retired instructions of an emulated run go,
per function and per translated block (docs/edge.md "Numbers").

QEMU's Debian build has no TCG plugins, so this reads its debug log:
  qemu-system-arm ... -icount shift=0 -d in_asm,exec,nochain -D run.log -kernel prog.elf
  tools/edge/qemu_profile.py run.log prog.elf [--nm arm-none-eabi-nm]
`in_asm` gives each translated block's instructions once, `exec` (with
`nochain`, so every block execution is logged) each execution; their product
is the count, attributed to functions by the ELF's symbol table. Counts are
exact for the emulated run; the log is large (tens of MB per million
blocks), so profile a small problem. Prints the top functions and blocks.
"""
import argparse, collections, re, subprocess
ap = argparse.ArgumentParser()
ap.add_argument('log')
ap.add_argument('elf')
ap.add_argument('--nm', default='arm-none-eabi-nm')
args = ap.parse_args()
log, elf = args.log, args.elf
# symbols
syms = []
for line in subprocess.run([args.nm, '-n', '-S', elf], capture_output=True, text=True).stdout.splitlines():
    p = line.split()
    if len(p) >= 4 and p[2] in 'tT':
        syms.append((int(p[0],16), int(p[1],16), p[3]))
def sym(a):
    for s,z,n in syms:
        if s <= a < s+z: return n
    return '?'
tb_len = {}  # tb start -> ninsn
cur = None; n = 0
execs = collections.Counter()
for line in open(log, errors='replace'):
    if line.startswith('IN:'):
        if cur is not None: tb_len[cur] = n
        cur = None; n = 0; continue
    m = re.match(r'^0x([0-9a-f]+):\s', line)
    if m:
        a = int(m.group(1),16)
        if cur is None: cur = a
        n += 1; continue
    m = re.search(r'Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/', line)
    if m:
        execs[int(m.group(1),16)] += 1
if cur is not None: tb_len[cur] = n
tot = collections.Counter()
for a, c in execs.items():
    tot[sym(a)] += c * tb_len.get(a, 0)
T = sum(tot.values())
for nme, c in tot.most_common(12): print(f'{c:10d} {100*c/T:5.1f}% {nme}')
print('total', T)
# hot TBs
hot = collections.Counter()
for a, c in execs.items():
    hot[a] = c * tb_len.get(a, 0)
print('hot blocks:')
for a, c in hot.most_common(14):
    print(f'{c:10d} 0x{a:x} len {tb_len.get(a,0)} execs {execs[a]} {sym(a)}')
