"""What the golden generators share: the versions they ran with, writing a
case file and the manifest, the byte-identity check and the command line.

Used by make_cases.py (tests/data/golden), make_nn_cases.py (tests/data/nn)
and make_vit_cases.py (tests/data/nn_vit); it imports no attnflow code.

Invariants:
* a generator's ``generate_all(out_dir, quiet)`` writes every file of its
  set into out_dir and returns (total bytes of the cases, number of cases);
* ``--check`` regenerates into a temporary directory and compares byte for
  byte with the committed ``*.safetensors`` files and MANIFEST.json (a file
  missing on either side fails); nothing under ``--out`` is written then;
* manifests are indented ASCII JSON with a final newline, keys in the order
  the generator gives them.
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile

import torch

from st_io import st_load

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def installed_versions(modules):
    """{module: version} in the order of ``modules``; torch without its local
    build tag (2.9.1+cu128 -> 2.9.1)."""
    out = {}
    for mod in modules:
        ver = __import__(mod).__version__
        out[mod] = ver.split("+")[0] if mod == "torch" else ver
    return out


def given(**entries):
    """The entries whose value is not None, in the order given (for the
    optional tensors and config keys of a case)."""
    return {k: v for k, v in entries.items() if v is not None}


def write_case(out_dir, name, data, **fields):
    """Writes out_dir/<name>.safetensors; returns (path, its manifest entry:
    name, file, the given fields in order, bytes, sha256)."""
    fname = name + ".safetensors"
    path = os.path.join(out_dir, fname)
    with open(path, "wb") as f:
        f.write(data)
    entry = dict(name=name, file=fname, **fields, bytes=len(data),
                 sha256=hashlib.sha256(data).hexdigest())
    return path, entry


def write_manifest(out_dir, manifest):
    with open(os.path.join(out_dir, "MANIFEST.json"), "wb") as f:
        f.write((json.dumps(manifest, indent=1, ensure_ascii=True) + "\n").encode("ascii"))


def print_tensor_diffs(fresh, committed):
    """Per tensor of two versions of a case file: a shape change or the
    largest absolute difference."""
    try:
        ta, _ = st_load(fresh)
        tb, _ = st_load(committed)
        for n in sorted(set(ta) & set(tb)):
            if ta[n].shape != tb[n].shape:
                print(f"    {n}: shape {tuple(tb[n].shape)} -> {tuple(ta[n].shape)}")
            elif not torch.equal(ta[n], tb[n]):
                dd = (ta[n].double() - tb[n].double()).abs()
                dd = dd[~torch.isnan(dd)]
                print(f"    {n}: max abs diff {float(dd.max()) if dd.numel() else 'nan'}")
    except Exception as e:  # noqa: BLE001
        print(f"    (could not compare tensors: {e})")


def check_against(committed, generate_all):
    """Regenerates into a temp dir and compares byte for byte with the
    committed files; prints every difference, returns True when identical."""
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        generate_all(tmp, quiet=True)
        fresh = sorted(os.listdir(tmp))
        old = sorted(f for f in os.listdir(committed)
                     if f.endswith(".safetensors") or f == "MANIFEST.json")
        for f in sorted(set(fresh) | set(old)):
            if f not in old:
                print(f"MISSING in {committed}: {f}")
                ok = False
                continue
            if f not in fresh:
                print(f"EXTRA in {committed} (not generated): {f}")
                ok = False
                continue
            a, b = os.path.join(tmp, f), os.path.join(committed, f)
            if open(a, "rb").read() != open(b, "rb").read():
                ok = False
                print(f"DIFFERS: {f}")
                if f.endswith(".safetensors"):
                    print_tensor_diffs(a, b)
    print("check: OK, byte-identical" if ok else "check: FAILED")
    return ok


def main(doc, default_out, pinned, requirements, generate_all, cases=None, strict_pins=False):
    """The generators' command line: --out DIR, --check, and --list when the
    case table ``cases`` (dicts with name, kind, desc) is given. A version
    other than ``pinned`` is a warning, or with ``strict_pins`` an error
    (exit 2). Returns the exit code."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out", default=default_out,
                    help=f"output directory (default {os.path.relpath(default_out, ROOT)})")
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temp dir and compare byte for byte with --out")
    if cases is not None:
        ap.add_argument("--list", action="store_true", help="print the case table and exit")
    args = ap.parse_args()

    torch.set_num_threads(1)
    for mod, ver in installed_versions(pinned).items():
        if ver != pinned[mod]:
            what = "error" if strict_pins else "warning"
            print(f"{what}: {mod} {ver} != pinned {pinned[mod]} ({requirements}); "
                  "output may differ", file=sys.stderr)
            if strict_pins:
                return 2
    if cases is not None and args.list:
        for c in cases:
            print(f"{c['name']:<40} {c['kind']:<17} {c['desc']}")
        return 0
    if args.check:
        return 0 if check_against(args.out, generate_all) else 1
    total, n = generate_all(args.out)
    print(f"{n} cases, {total} bytes ({total / 1024:.1f} KiB) in {args.out}")
    return 0
