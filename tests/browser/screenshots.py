"""Where the browser tests save their screenshots: the folder named by $BRUCE_SCREENSHOTS, else
the test's own tmp_path (never the repository), one picture per page and width."""

from __future__ import annotations

import os
from pathlib import Path

from playwright.async_api import Page

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def screenshot_dir(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("BRUCE_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def at_both_widths(page: Page, folder: Path, name: str) -> list[Path]:
    """Full-page screenshots of the page as it is at desktop and phone width; the viewport is
    left at desktop width. A phone-width page must not scroll sideways."""
    saved = []
    for label, size in (("phone", PHONE), ("desktop", DESKTOP)):
        await page.set_viewport_size(size)
        path = folder / f"{name}-{label}.png"
        await page.screenshot(path=str(path), full_page=True)
        saved.append(path)
        if label == "phone":
            overflow = await page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 1, f"{name} scrolls sideways by {overflow} px at phone width"
    return saved
