"""tiny_header.py — what the exporters of the tiny decoders' C headers
(tools/edge/tiny*/export*_header.py, read by micro/tiny/*_main.c) share: the
safetensors reader of the committed files (tests/data/edge) and the C
declarations they write. Standard library only (CI runs the exporters with the
system python3). Float weights become exact float32 hexadecimal literals of
their float16 values; integers are written as decimal lists."""
import json
import os
import struct

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "edge")

# dtype -> (bytes per element, struct code)
_DTYPES = {"F16": (2, "e"), "I8": (1, "b"), "I16": (2, "h"), "I32": (4, "i")}


def read_safetensors(name):
    """(metadata, {tensor name: flat list of values}) of tests/data/edge/NAME."""
    raw = open(os.path.join(DATA, name), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for tname, info in header.items():
        size, code = _DTYPES[info["dtype"]]
        a, b = info["data_offsets"]
        out[tname] = list(struct.unpack("<%d%s" % ((b - a) // size, code), raw[8 + n + a:8 + n + b]))
    return meta, out


def float_array(name, values):
    """static const float NAME[] of exact hexadecimal literals, six a line."""
    lines = ["static const float %s[%d] = {" % (name, len(values))]
    for i in range(0, len(values), 6):
        lines.append("  " + " ".join(float(v).hex() + "f," for v in values[i:i + 6]))
    lines.append("};")
    return "\n".join(lines)


def int_array(ctype, name, values):
    """static const CTYPE NAME[] on one line."""
    return "static const %s %s[%d] = {%s};" % (ctype, name, len(values), ",".join(map(str, values)))


def qmult_array(name, values):
    """static const af_qmult NAME[] from flat {mult, shift} pairs."""
    pairs = ["{%d,%d}" % (values[i], values[i + 1]) for i in range(0, len(values), 2)]
    return "static const af_qmult %s[%d] = {%s};" % (name, len(pairs), ",".join(pairs))


def token_arrays(prefix, vocab, expected):
    """The f32 programs' vocabulary (octal-escaped characters), prompt and
    expected token ids (from the *_expected.json of train.py)."""
    esc = "".join("\\%03o" % ord(c) for c in vocab)
    return ['static const char %s_vocab[] = "%s";' % (prefix, esc),
            "static const int %s_prompt[] = {%s};" % (prefix, ", ".join(map(str, expected["prompt_ids"]))),
            "static const int %s_expected[] = {%s};" % (prefix, ", ".join(map(str, expected["generated_ids"])))]


def write(path, lines):
    open(path, "w").write("\n".join(lines) + "\n")


class Lines(list):
    """The lines of a C header being written, with the int8 arrays' writers."""

    def arr(self, ctype, name, values):
        self.append(int_array(ctype, name, values))

    def qm(self, name, values):
        self.append(qmult_array(name, values))


def s8_defines(banner, prefix, meta, t, dims, eps_name):
    """An int8 program's header start: the banner lines, then #define
    PREFIX_K for each (K, metadata key) of dims, PREFIX_PROMPT_LEN, PREFIX_GEN
    and EPS_NAME (the integer epsilon)."""
    lines = Lines(banner)
    for k, m in dims:
        lines.append("#define %s_%s %s" % (prefix, k, meta[m]))
    lines.append("#define %s_PROMPT_LEN %d" % (prefix, len(t["prompt"])))
    lines.append("#define %s_GEN %d" % (prefix, len(t["expected_ids"])))
    lines.append("#define %s %s" % (eps_name, meta["eps"]))
    return lines
