#!/usr/bin/env python3
"""Generates src/model/bert/unicode_tables.cc, the Unicode data the BERT
WordPiece tokenizer (src/model/bert/wordpiece.cc) needs to reproduce the
Hugging Face `tokenizers` BertNormalizer + BertPreTokenizer:

  * a class for every code point (run-length ranges): Other (general category
    Cc Cf Cs Co; unassigned Cn is NOT other for HF), Punctuation (P*), Mn
    (nonspacing mark), or none;
  * the White_Space property (Zs + Zl + Zp + U+0009..U+000D + U+0085, which
    is exactly PropList.txt's White_Space);
  * full per-character lowercase mappings (str.lower() of one character,
    i.e. without the context-dependent final-sigma rule, like Rust's
    char::to_lowercase);
  * full canonical decompositions (NFD of one character), except Hangul
    syllables, which the C++ code decomposes algorithmically;
  * canonical combining classes (runs), for the canonical reordering step of
    NFD.

Source: Python's `unicodedata` (the Unicode version is written into the
output), then an HF compatibility pass. The Rust crates behind HF
`tokenizers` carry OLDER Unicode data (general categories of Unicode 8.0,
an old NFD table) and its "is_other" does not include unassigned code points
(Cn), so for exact id equality the tables are corrected wherever the pinned
`tokenizers` (tools/models/requirements-minilm.txt) behaves differently. The
pass probes every code point through tokenizers' own normalizers and
pre-tokenizer (clean text, accent stripping, NFD, Lowercase, BertPreTokenizer)
and through NFD of pairs for the combining classes, and reports how many
code points it corrected; the counts are written into the output.

Regenerate (inside the venv of requirements-minilm.txt, Python 3.11):

    python tools/models/gen_wordpiece_unicode.py > src/model/bert/unicode_tables.cc

--no-hf-compat gives the plain unicodedata tables (for comparison only).
"""
import argparse
import sys
import unicodedata as ud

MAX_CP = 0x110000
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3

# Must match enum class CharClass in src/model/bert/unicode.h.
CLASS_NONE, CLASS_OTHER, CLASS_PUNCT, CLASS_MN = 0, 1, 2, 3


def char_class(cp):
    cat = ud.category(chr(cp))
    # HF's BertNormalizer drops "other" characters, but its category tables
    # give unassigned code points (Cn) no category: they are kept.
    if cat in ("Cc", "Cf", "Cs", "Co"):
        return CLASS_OTHER
    if cat[0] == "P":
        return CLASS_PUNCT
    if cat == "Mn":
        return CLASS_MN
    return CLASS_NONE


def runs(fn):
    """[(start, value)] where value changes; the last run ends at MAX_CP."""
    out = []
    prev = None
    for cp in range(MAX_CP):
        v = fn(cp)
        if v != prev:
            out.append((cp, v))
            prev = v
    return out


def emit_array(name, ctype, values, per_line=12, fmt="0x{:X}"):
    lines = [f"const {ctype} {name}[] = {{"]
    for i in range(0, len(values), per_line):
        chunk = ", ".join(fmt.format(v) for v in values[i:i + per_line])
        lines.append(f"    {chunk},")
    lines.append("};")
    return "\n".join(lines)


def surrogate(cp):
    return 0xD800 <= cp <= 0xDFFF


class Tables:
    """All per-code-point data, from unicodedata."""

    def __init__(self):
        self.cls = [char_class(cp) for cp in range(MAX_CP)]
        self.ws = set(cp for cp in range(MAX_CP)
                      if ud.category(chr(cp)) in ("Zs", "Zl", "Zp")
                      or 0x09 <= cp <= 0x0D or cp == 0x85)
        self.lower = {}
        self.nfd = {}
        for cp in range(MAX_CP):
            if surrogate(cp):
                continue
            lo = chr(cp).lower()
            if lo != chr(cp):
                self.lower[cp] = lo
            if not HANGUL_FIRST <= cp <= HANGUL_LAST:
                d = ud.normalize("NFD", chr(cp))
                if d != chr(cp):
                    self.nfd[cp] = d
        self.ccc = [ud.combining(chr(cp)) for cp in range(MAX_CP)]
        self.notes = []


def set_mapping(table, c, to):
    """Makes table (code point -> string; absent = maps to itself) map c to
    ``to``; True when that changed the table."""
    cp = ord(c)
    if to == table.get(cp, c):
        return False
    if to == c:
        del table[cp]
    else:
        table[cp] = to
    return True


def hf_compat(t):
    """Corrects the tables to the behaviour of the installed HF tokenizers."""
    import tokenizers
    from tokenizers import normalizers, pre_tokenizers

    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                       strip_accents=False, lowercase=False)
    # BertNormalizer's accent stripping: NFD, then drop Mn. (The standalone
    # StripAccents normalizer drops all combining marks, Mn Mc Me: not it.)
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                       strip_accents=True, lowercase=False)
    nfd = normalizers.NFD()
    lower = normalizers.Lowercase()
    pre = pre_tokenizers.BertPreTokenizer()
    counts = {"class": 0, "white_space": 0, "nfd": 0, "lower": 0, "ccc": 0}
    for cp in range(MAX_CP):
        if surrogate(cp):
            continue
        c = chr(cp)
        # Class as HF sees it.
        if cp in (0, 0xFFFD):
            hf_cls = t.cls[cp]  # removed by an explicit rule, class irrelevant
        elif clean.normalize_str(c) == "" and c not in "\t\n\r":
            hf_cls = CLASS_OTHER
        elif nfd.normalize_str(c) == c and strip.normalize_str(c) == "":
            hf_cls = CLASS_MN
        elif nfd.normalize_str(c) != c and t.cls[cp] == CLASS_MN:
            hf_cls = CLASS_MN  # decomposes: only its parts' classes are used
        else:
            words = [w for w, _ in pre.pre_tokenize_str("a" + c + "b")]
            hf_cls = CLASS_PUNCT if words == ["a", c, "b"] else CLASS_NONE
        # ASCII punctuation is a hard-coded rule in C++; keep unicodedata's
        # class there (HF treats it as punctuation either way).
        if hf_cls != t.cls[cp] and not (cp < 0x80 and hf_cls == CLASS_PUNCT):
            t.cls[cp] = hf_cls
            counts["class"] += 1
        hf_ws = [w for w, _ in pre.pre_tokenize_str("a" + c + "b")] == ["a", "b"]
        if hf_ws != (cp in t.ws):
            (t.ws.add if hf_ws else t.ws.discard)(cp)
            counts["white_space"] += 1
        if not HANGUL_FIRST <= cp <= HANGUL_LAST and set_mapping(t.nfd, c, nfd.normalize_str(c)):
            counts["nfd"] += 1
        if set_mapping(t.lower, c, lower.normalize_str(c)):
            counts["lower"] += 1
    # Combining classes: HF reorders a pair of non-starters only when both
    # are known to its tables. Probe every non-zero class against a partner
    # of class 1 (U+0334) or 230 (U+0301); unknown ones become starters.
    for cp in range(MAX_CP):
        k = t.ccc[cp]
        if k == 0 or surrogate(cp):
            continue
        c = chr(cp)
        if k > 1:
            ok = nfd.normalize_str("a" + c + "\u0334").startswith("a\u0334")
        else:
            ok = nfd.normalize_str("a\u0301" + c).startswith("a" + t.nfd.get(cp, c)[:1])
        if not ok:
            t.ccc[cp] = 0
            counts["ccc"] += 1
    t.notes.append(f"HF compatibility pass against tokenizers {tokenizers.__version__}: "
                   + ", ".join(f"{k} {v}" for k, v in counts.items())
                   + " code points corrected")
    print(t.notes[-1], file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-hf-compat", action="store_true",
                    help="plain unicodedata tables (not id-exact with HF)")
    args = ap.parse_args()
    t = Tables()
    if not args.no_hf_compat:
        hf_compat(t)
    out = []
    notes = "".join(f"// {n}\n" for n in t.notes) or "// (no HF compatibility pass)\n"
    out.append(
        "// unicode_tables.cc — GENERATED by tools/models/gen_wordpiece_unicode.py\n"
        f"// from Python {sys.version_info.major}.{sys.version_info.minor} unicodedata "
        f"(Unicode {ud.unidata_version}). DO NOT EDIT; regenerate instead.\n"
        + notes +
        "//\n"
        "// Invariants (checked by tests/model/wordpiece_test.cc): every table is sorted by\n"
        "// code point; the class and combining-class runs start at U+0000 and\n"
        "// cover every code point up to U+10FFFF.\n"
        "#include \"model/bert/unicode.h\"\n\n"
        "namespace attnflow::wordpiece_unicode {\n"
        f"\nconst char kUnicodeVersion[] = \"{ud.unidata_version}\";\n")

    cls = runs(lambda cp: t.cls[cp])
    out.append("// Class runs: code points [kClassStart[i], kClassStart[i+1]) have class\n"
               "// kClassValue[i] (0 none, 1 Other, 2 Punctuation, 3 Mn; see above).")
    out.append(emit_array("kClassStart", "uint32_t", [s for s, _ in cls]))
    out.append(emit_array("kClassValue", "uint8_t", [v for _, v in cls], per_line=32,
                          fmt="{}"))
    out.append(f"const size_t kClassCount = {len(cls)};\n")

    ws = sorted(t.ws)
    out.append("// White_Space property (sorted).")
    out.append(emit_array("kWhiteSpace", "uint32_t", ws))
    out.append(f"const size_t kWhiteSpaceCount = {len(ws)};\n")

    lower_from, lower_to, lower_multi = [], [], []
    for cp in sorted(t.lower):
        lo = t.lower[cp]
        if len(lo) == 1:
            lower_from.append(cp)
            lower_to.append(ord(lo))
        else:
            assert len(lo) <= 3, hex(cp)
            lower_multi.append((cp, [ord(c) for c in lo] + [0] * (3 - len(lo))))
    out.append("// One-to-one lowercase mappings (sorted by source).")
    out.append(emit_array("kLowerFrom", "uint32_t", lower_from))
    out.append(emit_array("kLowerTo", "uint32_t", lower_to))
    out.append(f"const size_t kLowerCount = {len(lower_from)};")
    out.append("// One-to-many lowercase mappings: source, then up to 3 targets (0 = none).")
    flat = []
    for cp, tgt in lower_multi:
        flat.extend([cp] + tgt)
    out.append(emit_array("kLowerMulti", "uint32_t", flat, per_line=8))
    out.append(f"const size_t kLowerMultiCount = {len(lower_multi)};\n")

    dec_cp, dec_off, dec_len, pool = [], [], [], []
    for cp in sorted(t.nfd):
        d = t.nfd[cp]
        assert len(d) < 256
        dec_cp.append(cp)
        dec_off.append(len(pool))
        dec_len.append(len(d))
        pool.extend(ord(c) for c in d)
    assert len(pool) < 65536
    out.append("// Full canonical decompositions (NFD of one character; Hangul syllables\n"
               "// excluded): kDecompCp[i] -> kDecompPool[kDecompOffset[i] ..+ kDecompLength[i]].")
    out.append(emit_array("kDecompCp", "uint32_t", dec_cp))
    out.append(emit_array("kDecompOffset", "uint16_t", dec_off, fmt="{}"))
    out.append(emit_array("kDecompLength", "uint8_t", dec_len, per_line=32, fmt="{}"))
    out.append(f"const size_t kDecompCount = {len(dec_cp)};")
    out.append(emit_array("kDecompPool", "uint32_t", pool))
    out.append(f"const size_t kDecompPoolSize = {len(pool)};\n")

    ccc = runs(lambda cp: t.ccc[cp])
    out.append("// Canonical combining class runs: [kCccStart[i], kCccStart[i+1]) -> kCccValue[i].")
    out.append(emit_array("kCccStart", "uint32_t", [s for s, _ in ccc]))
    out.append(emit_array("kCccValue", "uint8_t", [v for _, v in ccc], per_line=24, fmt="{}"))
    out.append(f"const size_t kCccCount = {len(ccc)};\n")

    out.append("}  // namespace attnflow::wordpiece_unicode")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
