#!/usr/bin/env python3
"""embed_player.py — writes the C++ source that holds the player page.

The player page is compiled into the attnflow binary so that
`attnflow trace --html out.html` needs no file next to it. The page is
web/player.html with the in-page lab inlined: web/lab.css as a <style>
element just before </head>, web/lab.js as a <script> element just before
</body> (after the player's script, whose window.attnflowPlayer it reads).
The build runs this script (CMake custom command, cmake/modules/layers.cmake)
whenever one of these files changes; nothing generated is committed:

    python3 web/embed_player.py OUT.cc          # the C++ source
    python3 web/embed_player.py --page OUT.html  # the page itself (no trace)

Invariants: the generated file holds the page byte for byte, as adjacent raw
string literals split at line ends (each well under compiler limits); the
inlined files cannot close their element early, hold the trace slot marker,
or the raw-string delimiter (checked, exit 2).
"""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "web" / "player.html"
LAB_CSS = ROOT / "web" / "lab.css"
LAB_JS = ROOT / "web" / "lab.js"
PAGE_ONLY = len(sys.argv) > 2 and sys.argv[1] == "--page"
DST = pathlib.Path(sys.argv[-1]) if len(sys.argv) > 1 and sys.argv[-1] != "--page" else None
SLOT = "__ATTNFLOW_TRACE_JSON__"


def inline(page: str, path: pathlib.Path, tag: str, before: str) -> str:
    """Puts path's text in a <tag id="lab-..."> element before the one `before`."""
    text = path.read_text(encoding="utf-8")
    for bad in ("</" + tag, SLOT, ")" + DELIM + '"'):
        if bad.lower() in text.lower():
            raise ValueError(f"{path} contains {bad!r}, which would break the page")
    if page.count(before) != 1:
        raise ValueError(f"{SRC} must contain {before!r} exactly once")
    elem = f'<{tag} id="lab-{tag}">\n{text}</{tag}>\n'
    return page.replace(before, elem + before)
DELIM = "ATTNFLOW_PAGE"
CHUNK = 12000


def main() -> int:
    if DST is None:
        print("usage: embed_player.py OUT.cc | --page OUT.html", file=sys.stderr)
        return 2
    page = SRC.read_text(encoding="utf-8")
    try:
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
        "// web/player.html + web/lab.css + web/lab.js; not committed, do not edit.\n"
        "// Invariant: PlayerTemplate() is the page byte for byte.\n"
        '#include "attnflow/trace.h"\n\n'
        "namespace attnflow::trace {\n"
        "namespace {\n"
        f"constexpr char kPage[] =\n{body};\n"
        "}  // namespace\n\n"
        "std::string_view PlayerTemplate() { return std::string_view(kPage, sizeof(kPage) - 1); }\n\n"
        "}  // namespace attnflow::trace\n"
    )
    if not DST.exists() or DST.read_text(encoding="utf-8") != out:
        DST.parent.mkdir(parents=True, exist_ok=True)
        DST.write_text(out, encoding="utf-8")
        print(f"embed_player: wrote {DST} ({len(page)} bytes of page)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
