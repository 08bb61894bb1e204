"""cli_page_test.py — the player page for long (pooled) inputs, issue 13, in
Debian's chromium (Playwright, as tests/py/player_test.py; never downloads a
browser): pooled token chips show their tokens' text (range as the index, the
tokens in the tooltip), and Σ is a compact bar, not a stack of 1.000000.
Step times of a 600-token page are measured and printed (no time limit is
asserted: timings on the shared machine are noise).
Set ATTNFLOW_SKIP_BROWSER=1 to skip.
"""
import json
import os
import pathlib
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
        p = subprocess.run([CLI, "trace", "--tokens", "600", "--html", OUT / "toy600.html",
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
        self.assertEqual(pool, 3)  # 600 tokens > 256
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


if __name__ == "__main__":
    unittest.main()
