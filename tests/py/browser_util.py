"""browser_util.py — what the browser tests (player, lab, cli_page) share.

The paths they read from the environment, the `attnflow trace` runner, the
PNG chunk reader of their independent PNG decoders, and pages in Debian's
chromium (headless, background networking off) through
Playwright for Python (pinned in tools/deps/browser.pip; it never downloads a
browser): every request that is not file:// is aborted and recorded, and a
test fails at its cleanup if a page reached for the network or threw a
JavaScript error. Not a test itself (CMake registers tests/py/*_test.py).
"""
import os
import pathlib
import struct
import subprocess
import unittest
import zlib

os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")

CLI = os.environ.get("ATTNFLOW_CLI", "")
SRC = pathlib.Path(os.environ.get("ATTNFLOW_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BUILD = pathlib.Path(os.environ.get("ATTNFLOW_BUILD_DIR", SRC / "build"))
SHOTS = BUILD / "screenshots"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
        "--disable-default-apps", "--disable-sync", "--no-first-run", "--disable-extensions",
        "--disable-gpu"]


def run_cli(*args):
    p = subprocess.run([CLI, "trace", *map(str, args)], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def js_num(v):
    return {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.get(v, v)


def launch_browser(out):
    """Checks the CLI and chromium, makes `out` and SHOTS, starts Playwright
    and chromium; returns (playwright, browser)."""
    if not CLI or not os.access(CLI, os.X_OK):
        raise RuntimeError("ATTNFLOW_CLI must name the built attnflow binary")
    if not os.access(CHROMIUM, os.X_OK):
        raise RuntimeError("Debian's chromium is missing (tools/deps/browser.apt; ./run installs it)")
    from playwright.sync_api import sync_playwright  # pinned in tools/deps/browser.pip
    out.mkdir(parents=True, exist_ok=True)
    SHOTS.mkdir(parents=True, exist_ok=True)
    pw = sync_playwright().start()
    return pw, pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)


@unittest.skipIf(os.environ.get("ATTNFLOW_SKIP_BROWSER") == "1", "ATTNFLOW_SKIP_BROWSER=1")
class BrowserTestCase(unittest.TestCase):
    """A test class whose tests share one chromium: its setUpClass calls
    start_browser(out) (see launch_browser); tearDownClass closes it. Skipped,
    with every subclass, under ATTNFLOW_SKIP_BROWSER=1."""

    @classmethod
    def start_browser(cls, out):
        cls.pw, cls.browser = launch_browser(out)

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()
        cls.pw.stop()


def png_chunks(data):
    """The chunks of PNG bytes, in order, as (kind, body); checks the
    signature and every chunk's CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "bad PNG signature"
    at = 8
    while at < len(data):
        n = struct.unpack(">I", data[at:at + 4])[0]
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + n]
        crc = struct.unpack(">I", data[at + 8 + n:at + 12 + n])[0]
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, f"bad CRC in {kind}"
        yield kind, body
        at += 12 + n


def offline_context(test, browser, **options):
    """A new browser context (closed at the test's cleanup) that aborts and
    records every request that is not file://; the test fails at cleanup if
    there was one."""
    ctx = browser.new_context(**options)
    test.addCleanup(ctx.close)
    blocked = []

    def route(r):
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    ctx.route("**/*", route)
    test.addCleanup(lambda: test.assertEqual(blocked, [], "the page tried to reach the network"))
    return ctx


def open_page(test, ctx, path):
    """`path` in a new page of ctx; a JavaScript error fails the test at
    cleanup."""
    errors = []
    page = ctx.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(pathlib.Path(path).resolve().as_uri())
    test.addCleanup(lambda: test.assertEqual(errors, [], "JavaScript errors"))
    return page


def shot(page, name):
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
