"""browser_util.py — what the browser tests (player, lab, cli_page) share.

The paths they read from the environment, the `attnflow trace` runner, and
pages in Debian's chromium (headless, background networking off) through
Playwright for Python (pinned in tools/deps/browser.pip; it never downloads a
browser): every request that is not file:// is aborted and recorded, and a
test fails at its cleanup if a page reached for the network or threw a
JavaScript error. Not a test itself (CMake registers tests/py/*_test.py).
"""
import os
import pathlib
import subprocess

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
