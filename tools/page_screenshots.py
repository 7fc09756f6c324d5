"""Screenshots of each workspace of the page, in both languages and at a laptop's and a phone's size, for the
README's tour (``docs/screenshots/workspaces/<workspace>-<language>-<desktop|phone>.png``).

    python tools/page_screenshots.py [--url http://127.0.0.1:7860/] [--out docs/screenshots/workspaces]

Drives a running app with Playwright through an installed Chromium (``COSYVOICE_BROWSER`` or Debian's
``chromium``; it never downloads a browser). Each shot is of the window as a person sees it, not the whole page:
the action row at the bottom is part of what it shows.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

WORKSPACES = ("speak", "convert", "longform", "voices", "history")
SIZES = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def browser_path() -> str:
    import os

    found = os.environ.get("COSYVOICE_BROWSER") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise SystemExit("no Chromium found: install it (apt-get install chromium) or set COSYVOICE_BROWSER")
    return found


def take(url: str, out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    shots = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path(), args=BROWSER_ARGS)
        for size, viewport in SIZES.items():
            for lang, locale in (("en", "en-US"), ("zh", "zh-CN")):
                context = browser.new_context(viewport=viewport, locale=locale)
                context.add_init_script("localStorage.setItem('cosyvoice-notice-accepted', '1')")
                page = context.new_page()
                page.goto(url, timeout=120_000)
                page.wait_for_selector("#cv-generate", timeout=120_000)
                page.wait_for_timeout(3000)  # the load events' answers (labels, lists) have landed
                for workspace in WORKSPACES:
                    button = page.locator(f"#cv-ws-{workspace}-button")
                    if button.count() and button.is_visible():
                        button.click()
                    else:  # in the tabs' overflow menu on a narrow screen: the address opens it
                        page.evaluate(f"location.hash = '{workspace}'")
                    page.wait_for_selector(f"#cv-ws-{workspace}", state="visible", timeout=120_000)
                    page.wait_for_timeout(1500)
                    path = out / f"{workspace}-{lang}-{size}.png"
                    page.screenshot(path=str(path))
                    shots.append(path)
                context.close()
        browser.close()
    return shots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:7860/")
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots/workspaces"))
    args = parser.parse_args()
    for path in take(args.url.rstrip("/") + "/", args.out):
        print(path)


if __name__ == "__main__":
    main()
