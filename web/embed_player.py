#!/usr/bin/env python3
"""embed_player.py — writes the C++ source that holds web/player.html.

The player page is compiled into the attnflow binary so that
`attnflow trace --html out.html` needs no file next to it. The build runs this
script (CMake custom command, cmake/modules/layers.cmake) whenever the page
changes; nothing generated is committed:

    python3 web/embed_player.py OUT.cc

Invariant: the generated file holds the page byte for byte, as adjacent raw
string literals split at line ends (each well under compiler limits).
"""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "web" / "player.html"
DST = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else None
DELIM = "ATTNFLOW_PAGE"
CHUNK = 12000


def main() -> int:
    if DST is None:
        print("usage: embed_player.py OUT.cc", file=sys.stderr)
        return 2
    page = SRC.read_text(encoding="utf-8")
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
        "// web/player.html; not committed, do not edit.\n"
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
        DST.parent.mkdir(parents=True, exist_ok=True)
        print(f"embed_player: wrote {DST} ({len(page)} bytes of page)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
