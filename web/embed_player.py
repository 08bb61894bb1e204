#!/usr/bin/env python3
"""embed_player.py — writes the C++ source that holds the player page and
the page's stage table.

The player page is compiled into the attnflow binary so that
`attnflow trace --html out.html` needs no file next to it. The page is
web/player.html with three files put in:
  * src/player/stage_table.json (the one declaration of the page's stages,
    src/player/stage_table.h) in place of the __ATTNFLOW_STAGE_TABLE__
    marker of its <script id="stage-table" type="application/json">;
  * web/lab.css as a <style> element just before </head>;
  * web/lab.js as a <script> element just before </body> (after the
    player's script, whose window.attnflowPlayer it reads).
The same run writes the stage table as C++ data (player::StageTable(), read
by the page JSON writer and reader and the exports), so the C++ and the
page's JavaScript read one table. The build runs this script (CMake custom
command, cmake/modules/layers.cmake) whenever one of these files changes;
nothing generated is committed:

    python3 web/embed_player.py OUT.cc          # the C++ source
    python3 web/embed_player.py --page OUT.html  # the page itself (no trace)

Invariants: the generated file holds the page byte for byte, as adjacent raw
string literals split at line ends (each well under compiler limits); the
inlined files cannot close their element early, hold the trace slot marker,
or the raw-string delimiter (checked, exit 2); the stage table is checked
(unique names, declared layouts/steps/bases, bases before the stage; exit 2
naming the entry) before anything is written.
"""
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "web" / "player.html"
LAB_CSS = ROOT / "web" / "lab.css"
LAB_JS = ROOT / "web" / "lab.js"
TABLE = ROOT / "src" / "player" / "stage_table.json"
PAGE_ONLY = len(sys.argv) > 2 and sys.argv[1] == "--page"
DST = pathlib.Path(sys.argv[-1]) if len(sys.argv) > 1 and sys.argv[-1] != "--page" else None
SLOT = "__ATTNFLOW_TRACE_JSON__"
TABLE_SLOT = "__ATTNFLOW_STAGE_TABLE__"
DELIM = "ATTNFLOW_PAGE"
CHUNK = 12000
TABLE_FORMAT = "attnflow-stage-table/1"
DERIVE_ARITY = {"scale": 1, "copy": 1, "add": 2, "heads": 1}
STAGE_KEYS = {"name", "layout", "post", "pre", "derive", "shared_scale", "probabilities", "heatmap"}
FLAGS = ("shared_scale", "probabilities", "heatmap")


def check_text(text: str, path: pathlib.Path, tag: str) -> None:
    for bad in ("</" + tag, SLOT, TABLE_SLOT, ")" + DELIM + '"'):
        if bad.lower() in text.lower():
            raise ValueError(f"{path} contains {bad!r}, which would break the page")


def inline(page: str, path: pathlib.Path, tag: str, before: str) -> str:
    """Puts path's text in a <tag id="lab-..."> element before the one `before`."""
    text = path.read_text(encoding="utf-8")
    check_text(text, path, tag)
    if page.count(before) != 1:
        raise ValueError(f"{SRC} must contain {before!r} exactly once")
    elem = f'<{tag} id="lab-{tag}">\n{text}</{tag}>\n'
    return page.replace(before, elem + before)


def load_table() -> tuple:
    """The stage table's text and its checked content."""
    text = TABLE.read_text(encoding="utf-8")
    check_text(text, TABLE, "script")
    if "<" in text:
        raise ValueError(f"{TABLE} contains '<' (the page holds it in a <script> element)")
    try:
        t = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{TABLE}: not valid JSON: {e}") from None

    def bad(what):
        return ValueError(f"{TABLE}: {what}")

    if not isinstance(t, dict) or t.get("format") != TABLE_FORMAT:
        raise bad(f"format must be {TABLE_FORMAT!r}")
    layouts, steps, stages = t.get("layouts"), t.get("steps"), t.get("stages")
    if not isinstance(layouts, dict) or not layouts:
        raise bad("layouts must be a non-empty object")
    for name, l in layouts.items():
        if (not re.fullmatch(r"[a-z][a-z_]*", name) or not isinstance(l, dict) or l.get("rank") not in (3, 4)
                or not isinstance(l.get("axes"), list) or len(l["axes"]) != l["rank"] - 1
                or not all(isinstance(a, str) for a in l["axes"])):
            raise bad(f"layouts.{name} must be {{rank: 3 or 4, axes: rank - 1 strings}}")
    if not isinstance(steps, list) or not steps:
        raise bad("steps must be a non-empty array")
    step_ids = []
    for i, s in enumerate(steps):
        if (not isinstance(s, dict) or not isinstance(s.get("id"), str) or not isinstance(s.get("title"), str)
                or set(s) - {"id", "title", "primary"}):
            raise bad(f"steps[{i}] must be {{id, title, optional primary}}")
        if s["id"] in step_ids:
            raise bad(f"steps[{i}]: id {s['id']!r} is used twice")
        step_ids.append(s["id"])
    if not isinstance(stages, list) or not stages:
        raise bad("stages must be a non-empty array")
    names = []
    for i, s in enumerate(stages):
        where = f"stages[{i}]"
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            raise bad(f"{where} must be an object with a name")
        where = f"stages[{i}] ({s['name']})"
        if set(s) - STAGE_KEYS:
            raise bad(f"{where}: unknown keys {sorted(set(s) - STAGE_KEYS)}")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", s["name"]) or s["name"] in names:
            raise bad(f"{where}: the name must be a new lower-case identifier")
        if s.get("layout") not in layouts:
            raise bad(f"{where}: layout {s.get('layout')!r} is not declared in layouts")
        for k in ("post", "pre"):
            if k in s and s[k] not in step_ids:
                raise bad(f"{where}: {k} step {s[k]!r} is not declared in steps")
        for k in FLAGS:
            if k in s and not isinstance(s[k], bool):
                raise bad(f"{where}: {k} must be true or false")
        if "derive" in s:
            d = s["derive"]
            if (not isinstance(d, dict) or set(d) != {"op", "of"} or d["op"] not in DERIVE_ARITY
                    or not isinstance(d["of"], list) or len(d["of"]) != DERIVE_ARITY[d["op"]]):
                raise bad(f"{where}: derive must be {{op: scale|copy|heads (1 base) or add (2), of: [...]}}")
            for b in d["of"]:
                if b not in names:
                    raise bad(f"{where}: derive base {b!r} must be a stage declared before it")
        names.append(s["name"])
    for s in steps:
        for p in s.get("primary", []):
            shown = [x["name"] for x in stages if s["id"] in (x.get("post"), x.get("pre"))]
            if p not in shown:
                raise bad(f"steps {s['id']!r}: primary {p!r} is not a stage of that step")
    return text, t


def cpp_str(s: str) -> str:
    """A C++ string literal of s's UTF-8 bytes (non-ASCII as octal escapes)."""
    out = []
    for b in s.encode("utf-8"):
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def cpp_list(items) -> str:
    return "{" + ", ".join(cpp_str(x) for x in items) + "}"


def camel(name: str) -> str:
    return "k" + "".join(p.capitalize() for p in name.split("_"))


def table_cpp(t: dict) -> str:
    layouts = ",\n      ".join(
        f"{{Layout::{camel(n)}, {cpp_str(n)}, {l['rank']}, {cpp_list(l['axes'])}}}" for n, l in t["layouts"].items())
    steps = ",\n      ".join(
        f"{{{cpp_str(s['id'])}, {cpp_str(s['title'])}, {cpp_list(s.get('primary', []))}}}" for s in t["steps"])
    stages = ",\n      ".join(
        f"{{{cpp_str(s['name'])}, Layout::{camel(s['layout'])}, {cpp_str(s.get('post', ''))}, "
        f"{cpp_str(s.get('pre', ''))}, {cpp_str(s.get('derive', {}).get('op', ''))}, "
        f"{cpp_list(s.get('derive', {}).get('of', []))}, "
        + ", ".join("true" if s.get(k, False) else "false" for k in FLAGS) + "}"
        for s in t["stages"])
    return (
        "const PageStageTable& StageTable() {\n"
        "  static const PageStageTable* const kTable = new PageStageTable{\n"
        f"      {{{layouts}}},\n"
        f"      {{{steps}}},\n"
        f"      {{{stages}}}}};\n"
        "  return *kTable;\n"
        "}\n")


def main() -> int:
    if DST is None:
        print("usage: embed_player.py OUT.cc | --page OUT.html", file=sys.stderr)
        return 2
    page = SRC.read_text(encoding="utf-8")
    try:
        table_text, table = load_table()
        if page.count(TABLE_SLOT) != 1:
            raise ValueError(f"{SRC} must contain {TABLE_SLOT!r} exactly once")
        page = page.replace(TABLE_SLOT, table_text)
        page = inline(page, LAB_CSS, "style", "</head>")
        page = inline(page, LAB_JS, "script", "</body>")
    except ValueError as e:
        print(f"embed_player: {e}", file=sys.stderr)
        return 2
    if PAGE_ONLY:
        DST.write_text(page, encoding="utf-8")
        return 0
    if ")" + DELIM + '"' in page:
        print(f"embed_player: {SRC} contains the raw-string delimiter", file=sys.stderr)
        return 2
    chunks, cur = [], ""
    for line in page.splitlines(keepends=True):
        if cur and len(cur) + len(line) > CHUNK:
            chunks.append(cur)
            cur = ""
        cur += line
    if cur:
        chunks.append(cur)
    body = "\n".join(f'R"{DELIM}({c}){DELIM}"' for c in chunks)
    out = (
        "// player_html.cc — GENERATED at build time by web/embed_player.py from\n"
        "// web/player.html + src/player/stage_table.json + web/lab.css + web/lab.js;\n"
        "// not committed, do not edit.\n"
        "// Invariants: PlayerTemplate() is the page byte for byte; StageTable() is\n"
        "// the stage table the page holds.\n"
        '#include "attnflow/player.h"\n'
        '#include "player/stage_table.h"\n\n'
        "namespace attnflow::player {\n"
        "namespace {\n"
        f"constexpr char kPage[] =\n{body};\n"
        "}  // namespace\n\n"
        "std::string_view PlayerTemplate() { return std::string_view(kPage, sizeof(kPage) - 1); }\n\n"
        + table_cpp(table) +
        "\n}  // namespace attnflow::player\n"
    )
    if not DST.exists() or DST.read_text(encoding="utf-8") != out:
        DST.parent.mkdir(parents=True, exist_ok=True)
        DST.write_text(out, encoding="utf-8")
        print(f"embed_player: wrote {DST} ({len(page)} bytes of page)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
