"""A real headless Chromium (Debian's, driven through chromedriver by Selenium).

Used by the report's browser test, and by ``make report-example``::

    python -m tests.browser RUN/report/index.html docs/report-example.png

Every process started (chromedriver, chromium and its helpers) is stopped by PID on exit.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS: tuple[str, ...] = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
)
MAX_SCREENSHOT_HEIGHT = 12000


def missing_browser() -> str | None:
    """Why the browser cannot run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return (f"{path} is not installed (make browser runs apt-get install chromium "
                    "chromium-driver)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat[stat.rfind(")") + 2 :].split()[1])
            tree.setdefault(parent, []).append(int(entry.name))
    return tree


def descendants(pid: int) -> set[int]:
    """Live descendants of a process."""
    tree, found, todo = _children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


@contextmanager
def headless_chromium(width: int = 1100, height: int = 900) -> Iterator[Any]:
    """A Selenium driver of headless Chromium that records the console; stopped on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # chromium leaves its singleton socket's directory in TMPDIR after quitting: give it one
    # of ours, removed with everything in it on exit
    scratch = tempfile.TemporaryDirectory(prefix="offline-iaas-chromium-")
    service = Service(executable_path=str(CHROMEDRIVER),
                      env={**os.environ, "TMPDIR": scratch.name})
    try:
        driver = webdriver.Chrome(options=options, service=service)
    except BaseException:
        scratch.cleanup()
        raise
    root = service.process.pid
    started = {root, *descendants(root)}
    try:
        yield driver
    finally:
        started |= descendants(root)
        try:
            driver.quit()
        finally:
            for pid in started:
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while any(alive(p) for p in started) and time.monotonic() < deadline:
                time.sleep(0.05)
            scratch.cleanup()


@dataclass(frozen=True)
class PageCheck:
    """What a page did in the browser."""

    title: str
    console: list[dict[str, Any]]
    """Console entries of level SEVERE (errors, failed loads)."""
    images: list[dict[str, Any]]
    """Each ``<img>``: its ``alt``, ``naturalWidth``, ``naturalHeight`` and ``complete``."""


def check_page(driver: Any, path: Path, screenshot: Path | None = None) -> PageCheck:
    """Open a local HTML file, wait for it to load, read its console and images.

    With ``screenshot``, the whole page is saved there as PNG.
    """
    driver.get(path.resolve().as_uri())
    deadline = time.monotonic() + 20
    while driver.execute_script("return document.readyState") != "complete":
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not finish loading")
        time.sleep(0.05)
    images = driver.execute_script(
        "return Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete,"
        " naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight}))"
    )
    console = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    if screenshot is not None:
        width = driver.execute_script("return document.documentElement.scrollWidth")
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(max(width, 800), min(height + 120, MAX_SCREENSHOT_HEIGHT))
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(screenshot))
    return PageCheck(driver.title, console, images)


def main(argv: list[str]) -> int:
    """``python -m tests.browser PAGE.html SCREENSHOT.png``: check a page, save its picture."""
    if len(argv) != 2:
        print("usage: python -m tests.browser PAGE.html SCREENSHOT.png", file=sys.stderr)
        return 2
    why = missing_browser()
    if why is not None:
        print(f"browser: {why}", file=sys.stderr)
        return 1
    with headless_chromium() as driver:
        result = check_page(driver, Path(argv[0]), Path(argv[1]))
    broken = [i["alt"] for i in result.images if not i["naturalWidth"]]
    for entry in result.console:
        print(f"browser: console: {entry.get('message')}", file=sys.stderr)
    for alt in broken:
        print(f"browser: image not rendered: {alt}", file=sys.stderr)
    print(f"browser: {len(result.images)} images, screenshot {argv[1]}")
    return 1 if result.console or broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
