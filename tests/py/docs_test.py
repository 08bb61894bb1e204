#!/usr/bin/env python3
"""docs_test.py — the docs name only commands, flags and files that exist.

Reads README.md, DEVELOPERS.md and docs/*.md (inline code spans, shell
blocks, markdown links and table rows) and the built CLI's help
($ATTNFLOW_CLI: `attnflow --help`, `attnflow CMD --help` and the help of
every nested subcommand), and fails when a doc (or a help text) names:

* `attnflow CMD ...` where CMD is not a command, or a subcommand / a choice of
  a positional (`bench prefill|decode`, `ring verify prefill`) that the help
  does not list;
* a flag (`--name` or `-x`) after `attnflow CMD [SUB]` that the command's
  help does not list;
* `./run X` where X is not one of run's commands (its usage line);
* a repository path (`tools/demo/lab_port.py`, `src/{core,io}/`,
  `tests/py/*_test.py`, `attnflow/nn_vit.h` = include/attnflow/...) or a
  relative markdown link that does not exist (globs and braces must match);
* a default that contradicts the CLI: a help text whose "(default X)" is not
  the default CLI11 shows for that option, and a doc line or table row that
  puts `--flag` next to "default X" where X is not that default; the CI fuzz
  seconds (N s per fuzz target) that differ from run's;
* history instead of the present: "session N", "session-start", "this
  session", "issue N session" in a doc or in a source file's text (code
  comments included); what a session changed and dated runs go to
  bench/results/LEDGER.md (not checked).

Every command's help example (`Example:`) is checked like a doc line. Not a
browser test: it needs only the CLI. Registered with CTest by CMakeLists.txt
(tests/py/*_test.py).
"""
import glob
import os
import pathlib
import re
import subprocess
import unittest

SRC = pathlib.Path(os.environ.get("ATTNFLOW_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
CLI = os.environ.get("ATTNFLOW_CLI", str(SRC / "build" / "attnflow"))
DOCS = [SRC / "README.md", SRC / "DEVELOPERS.md"] + sorted((SRC / "docs").glob("*.md"))
# Repository top-level entries a path may start with.
TOP = ("include", "src", "tests", "tools", "docs", "bench", "web", "micro", "python", "cmake",
       "fuzz")
TOP_FILES = ("README.md", "DEVELOPERS.md", "CMakeLists.txt", "pyproject.toml")
# Where history may not be written: the docs and every source file (the
# ledger, raw results and test data are not sources).
SOURCE_DIRS = ("src", "include", "tools", "fuzz", "web", "cmake", "micro", "python", "tests", "bench")
SOURCE_SUFFIXES = {".cc", ".h", ".c", ".py", ".js", ".html", ".css", ".cmake", ".sh", ".txt", ".json",
                   ".md", ".inc", ".toml"}
NOT_SOURCES = ("bench/results/", "tests/data/", "tests/regress/", "python/build", "micro/build")
HISTORY = re.compile(r"\bsessions? \d+|\bsession-start\b|\b(?:this|that|the previous|the first|the next) "
                     r"session\b|\bissue[ -]\d+ session\b", re.IGNORECASE)
SHELL_LANGS = {"", "sh", "bash", "shell", "console"}
FLAG = re.compile(r"(?<![\w./=-])(--[A-Za-z][\w-]*|-[A-Za-z])(?![\w-])")


def run(args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


class Help:
    """A command's help: flags, subcommands, positional choices, defaults."""

    def __init__(self, path):
        self.path = path
        rc, self.text = run([CLI, *path, "--help"])
        assert rc == 0, f"attnflow {' '.join(path)} --help: exit {rc}\n{self.text}"
        self.flags, self.subs, self.choices, self.defaults, self.said = set(), [], None, {}, {}
        section, last = "", None
        for line in self.text.splitlines():
            if re.match(r"^\S.*:$", line):
                section = line[:-1]
                continue
            if section == "Options" and line.startswith("  -"):
                # "  -q,--quiet  desc" / "  --heads INT:[1 - 65536]=[8] ...  desc"
                names, _, rest = line.strip().partition(" ")
                names = names.split(",")
                parts = re.split(r"\s{2,}", rest.strip(), maxsplit=1)
                typ, desc = parts[0], parts[1] if len(parts) > 1 else ""
                self.flags.update(names)
                d = re.search(r"=(\[[^\]]*\]|[^\s\[]\S*)", typ)
                if d:
                    for n in names:
                        self.defaults[n] = d.group(1).strip("[]")
                last = names
                self._said(names, desc)
            elif section == "Options" and line.startswith("      ") and last:
                self._said(last, line.strip())
            elif section == "Subcommands" and re.match(r"^  \S", line):
                self.subs.append(line.split()[0])
            elif section == "Positionals" and re.match(r"^  \S", line) and self.choices is None:
                c = re.search(r":\{([^}]*)\}", line)
                if c:
                    self.choices = c.group(1).split(",")

    def _said(self, names, desc):
        d = re.search(r"\(default:? (-?[\d.]+)[);,]", desc)
        if d:
            for n in names:
                self.said[n] = d.group(1)

    def examples(self):
        """The indented lines after "Example:" / "Examples:"."""
        out, on = [], False
        for line in self.text.splitlines():
            if line.strip() in ("Example:", "Examples:"):
                on = True
            elif on and line.startswith("  ") and line.strip():
                out.append(line.strip())
            else:
                on = False
        return out


class Cli:
    def __init__(self):
        rc, text = run([CLI, "--help"])
        assert rc == 0, text
        m = re.search(r"^Commands: (.*)$", text, re.M)
        assert m, "attnflow --help lists no commands"
        self.commands = [c.strip() for c in m.group(1).split(",")]
        self.helps = {}

    def help(self, path):
        key = tuple(path)
        if key not in self.helps:
            self.helps[key] = Help(list(path))
        return self.helps[key]

    def all_helps(self):
        out = []

        def walk(path):
            h = self.help(path)
            out.append(h)
            for s in h.subs:
                walk(path + [s])
        for c in self.commands:
            walk([c])
        return out


def run_commands():
    """The commands of ./run, from its usage line ("usage: ./run demo | test [--quick] | ...")."""
    rc, text = run([str(SRC / "run")])
    m = re.search(r"usage: \./run (.*)", text)
    assert m, f"./run printed no usage line:\n{text}"
    return {item.split()[0] for item in m.group(1).split(" | ")}


def doc_snippets(path):
    """(line number, text, kind) for every inline code span ("span", which may
    run over a line break), shell block line ("shell"), table row ("row") and
    markdown link target ("link")."""
    out, fence, lang, prose = [], None, "", []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        f = re.match(r"^\s*(```+)(\w*)", line)
        if f:
            if fence is None:
                fence, lang = f.group(1), f.group(2)
            elif f.group(1) == fence:
                fence = None
            prose.append((n, ""))
            continue
        if fence is not None:
            if lang in SHELL_LANGS:
                out.append((n, re.sub(r"^\s*\$ ", "", line), "shell"))
            prose.append((n, ""))
            continue
        text = line.replace("\\|", "|")
        prose.append((n, text))
        for t in re.findall(r"\]\(([^)\s]+)\)", text):
            out.append((n, t, "link"))
        if text.lstrip().startswith("|"):
            out.append((n, text, "row"))
    # Code spans over the prose (a span never crosses a blank line or a cell).
    joined, starts = "", []
    for n, t in prose:
        starts.append((len(joined), n))
        joined += t + "\n"
    for m in re.finditer(r"`([^`]+)`", joined):
        if "\n\n" in m.group(1):
            continue
        n = max(ln for off, ln in starts if off <= m.start())
        out.append((n, m.group(1).replace("\n", " "), "span"))
    return out


def cut_command(s):
    """The text of one command: up to a pipe, a list operator, a redirect or a comment."""
    s = re.sub(r'"[^"]*"|\'[^\']*\'', " STR ", s)
    return re.split(r"\s(?:\||;|&&|\|\||>|2>|#)\s|\s#\s*$", s + " ")[0]


def expand_braces(p):
    m = re.search(r"\{([^{}]*)\}", p)
    if not m:
        return [p]
    return [q for alt in m.group(1).split(",") for q in expand_braces(p[:m.start()] + alt + p[m.end():])]


class DocsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cli = Cli()
        cls.run_cmds = run_commands()

    def check_command(self, where, text, errors):
        """`attnflow CMD [SUB...] flags` anywhere in text."""
        for m in re.finditer(r"(?:^|[\s(/;&|])attnflow\s+([a-z][\w-]*)(.*)", text):
            cmd, rest = m.group(1), cut_command(m.group(2))
            if cmd not in self.cli.commands:
                errors.append(f"{where}: `attnflow {cmd}`: no such command (commands: {', '.join(self.cli.commands)})")
                continue
            path, words = [cmd], rest.split()
            helps = [self.cli.help(path)]
            # Nested subcommands, then a positional with a fixed set of choices.
            while words and helps[-1].subs and not words[0].startswith("-"):
                alts = words.pop(0).split("|")  # `ring verify|bench`: each must exist
                bad = [w for w in alts if w not in helps[-1].subs]
                if bad:
                    errors.append(f"{where}: `attnflow {' '.join(path)} {bad[0]}`: not a subcommand "
                                  f"({', '.join(helps[-1].subs)})")
                    break
                helps += [self.cli.help(path + [w]) for w in alts[1:]]
                path.append(alts[0])
                helps.append(self.cli.help(path))
            if words and helps[-1].choices and re.fullmatch(r"[a-z_]+(\|[a-z_]+)*", words[0]):
                for alt in words[0].split("|"):
                    if alt not in helps[-1].choices:
                        errors.append(f"{where}: `attnflow {' '.join(path)} {alt}`: not one of "
                                      f"{', '.join(helps[-1].choices)}")
            known = set().union(*(h.flags for h in helps))
            for flag in FLAG.findall(rest):
                if flag not in known:
                    errors.append(f"{where}: `attnflow {' '.join(path)} ... {flag}`: "
                                  f"not an option of `attnflow {' '.join(path)}`")

    def check_run(self, where, text, errors):
        for m in re.finditer(r"(?:^|[\s(`])\./run\s+([a-z][\w-]*)", text):
            if m.group(1) not in self.run_cmds:
                errors.append(f"{where}: `./run {m.group(1)}`: run has no such command "
                              f"({', '.join(sorted(self.run_cmds))})")

    def check_paths(self, where, doc, text, kind, errors):
        if kind == "link":
            t = text.split("#")[0]
            if not t or re.match(r"^[a-z]+:", t):
                return
            if not (doc.parent / t).exists():
                errors.append(f"{where}: link to {t}: no such file")
            return
        for tok in re.findall(r"[\w./*{},<>+-]+", text):
            tok = tok.rstrip(".,:;")
            cand = None
            if re.match(r"^(\./)?(%s)/" % "|".join(TOP), tok) or tok in TOP_FILES:
                cand = tok[2:] if tok.startswith("./") else tok
            elif re.match(r"^attnflow/[\w-]+\.h$", tok):
                cand = "include/" + tok
            if cand is None or "..." in cand or "$" in cand:
                continue
            cand = re.sub(r"<[^>]*>", "*", cand)
            if re.search(r"[<>]", cand):
                continue
            for c in expand_braces(cand):
                if not glob.glob(str(SRC / c), recursive=True):
                    errors.append(f"{where}: {c}: no such file or directory in the repository")

    def check_defaults(self, where, text, errors):
        """`--flag ... default X` in one table row / line: X must be the CLI's default."""
        for m in re.finditer(r"(--[A-Za-z][\w-]*)([^|]*?)\bdefault:?\s+`?(-?\d[\d.]*)\b", text):
            flag, between, said = m.group(1), m.group(2), m.group(3)
            if "--" in between or len(between) > 80:
                continue
            defaults = {h.defaults[flag] for h in self.cli.all_helps() if flag in h.defaults}
            if defaults and said not in defaults:
                errors.append(f"{where}: {flag} default {said}, but the CLI's default is "
                              f"{' or '.join(sorted(defaults))}")

    # ------------------------------------------------------------------
    def test_docs_name_only_existing_commands_flags_and_files(self):
        errors = []
        for doc in DOCS:
            rel = doc.relative_to(SRC)
            for n, text, kind in doc_snippets(doc):
                where = f"{rel}:{n}"
                if kind in ("span", "shell"):
                    self.check_command(where, text, errors)
                    self.check_run(where, text, errors)
                if kind in ("span", "shell", "link"):
                    self.check_paths(where, doc, text, kind, errors)
                if kind in ("row",) or (kind == "span" and text.startswith("--")):
                    self.check_defaults(where, text, errors)
            # Prose lines too: "--flag N (default X)" outside tables.
            for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
                if not line.lstrip().startswith("|"):
                    self.check_defaults(f"{rel}:{n}", line, errors)
        self.assertEqual(errors, [], "\n" + "\n".join(errors))

    def test_code_fences_close(self):
        """Every ``` block closes with a bare ``` line: a closing fence with
        text after it does not close (CommonMark), and the rest of the page
        renders as code."""
        errors = []
        for doc in DOCS:
            rel = doc.relative_to(SRC)
            open_at = None
            for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
                m = re.match(r"^\s{0,3}```(.*)$", line)
                if not m:
                    continue
                if open_at is None:
                    open_at = n
                elif m.group(1).strip():
                    errors.append(f"{rel}:{n}: a fence with text after it inside the block opened "
                                  f"at line {open_at} (does not close it)")
                else:
                    open_at = None
            if open_at is not None:
                errors.append(f"{rel}:{open_at}: code block never closed")
        self.assertEqual(errors, [], "\n" + "\n".join(errors))

    def test_help_defaults_and_examples_agree_with_the_cli(self):
        errors = []
        for h in self.cli.all_helps():
            name = "attnflow " + " ".join(h.path) + " --help"
            for flag, said in h.said.items():
                # A shown -1 or 0 is a "computed" sentinel that the text explains.
                if flag in h.defaults and h.defaults[flag] not in ("-1", "0") and h.defaults[flag] != said:
                    errors.append(f"{name}: {flag} says (default {said}) but its default is {h.defaults[flag]}")
            if len(h.path) == 1 and not h.examples():
                errors.append(f"{name}: no example")
            for ex in h.examples():
                self.check_command(name + " example", ex, errors)
        self.assertEqual(errors, [], "\n" + "\n".join(errors))

    def test_ci_fuzz_seconds_are_runs(self):
        m = re.search(r"ATTNFLOW_CI_FUZZ_SECONDS:-(\d+)", (SRC / "run").read_text())
        self.assertIsNotNone(m)
        errors = []
        for doc in DOCS:
            for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
                for said in re.findall(r"(\d+) s (?:per fuzz target|libFuzzer run|of each of the \d+ fuzz targets)", line):
                    if said != m.group(1):
                        errors.append(f"{doc.relative_to(SRC)}:{n}: {said} s per fuzz target, run uses {m.group(1)}")
        self.assertEqual(errors, [], "\n" + "\n".join(errors))

    def history_lines(self, path, text):
        return [f"{path}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
                if HISTORY.search(line)]

    def test_docs_and_sources_state_the_present(self):
        """No "session N" history in the docs or the sources (DEVELOPERS.md, "Docs")."""
        errors = []
        files = list(DOCS) + [SRC / "run", SRC / "CMakeLists.txt"]
        for top in SOURCE_DIRS:
            files += [f for f in (SRC / top).rglob("*") if f.is_file() and
                      (f.suffix in SOURCE_SUFFIXES or f.name == "CMakeLists.txt")]
        for f in files:
            rel = f.relative_to(SRC).as_posix()
            if rel.startswith(NOT_SOURCES) or rel == "tests/py/docs_test.py":
                continue
            errors += self.history_lines(rel, f.read_text(encoding="utf-8", errors="replace"))
        self.assertEqual(errors, [], "\n" + "\n".join(errors) +
                         "\n(history and dated runs go to bench/results/LEDGER.md)")

    def test_the_checker_can_fail(self):
        """The checks catch a made-up command, subcommand, flag, path and default."""
        errors = []
        self.check_command("t", "attnflow nosuchcmd --x", errors)
        self.check_command("t", "attnflow trace --no-such-flag", errors)
        self.check_command("t", "attnflow bench prefil", errors)
        self.check_command("t", "mpirun -n 2 attnflow ring prefill --q-len 1024", errors)
        self.check_run("t", "./run nosuch", errors)
        self.check_paths("t", SRC / "README.md", "tools/demo/no_such_file.py", "span", errors)
        self.check_paths("t", SRC / "README.md", "docs/nope.md", "link", errors)
        self.check_defaults("t", "| `--max-page-tokens N` | pools above this (default 999) |", errors)
        errors += self.history_lines("t", "Session 11 measured it.\nas the session-start binary did\n"
                                          "(issue 18 session 4)\nthis session changed")
        self.assertEqual(len(errors), 12, "\n".join(errors))
        ok = []
        self.check_command("t", "attnflow trace -q --decode-steps 3 --html x.html", ok)
        self.check_command("t", "mpirun -np 4 build/attnflow ring verify prefill --q-len 100", ok)
        self.check_paths("t", SRC / "README.md", "src/{core,io}/ tests/py/*_test.py attnflow/nn_vit.h", "span", ok)
        ok += self.history_lines("t", "a chat session keeps its KV cache\nthe session's machine")
        self.assertEqual(ok, [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
