"""Fixtures for the console's browser tests: Debian's chromium driven by Playwright, and
small clients for the control API to set up and check what the page did.

The Rust end-to-end test `gateway/tests/e2e/browser.rs` starts the real binary twice in
front of tests/fake_agent.py and runs this folder with:

  TETHER_URL          a gateway without [auth] (the `local` account), with workspace_dir
  TETHER_STORE        its SQLite file (feedback is checked in the database too)
  TETHER_AUTH_URL     a gateway with [auth]: API keys TETHER_KEY_A and TETHER_KEY_B
  TETHER_AGENT_URL    the fake agent (what it received)
  TETHER_APPROVALS_URL a gateway without [auth] in front of a Responses agent whose
                      `approve:NAME` runs wait for a person
  TETHER_TOOL_LOG     that agent's --tool-log: every tool an approval let run
  TETHER_SCREENSHOTS  where the README's screenshots are written
  CHROMIUM            the browser's executable (default: `chromium` on PATH)

No browser is downloaded: Playwright launches the executable it is given.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

TETHER_URL = os.environ["TETHER_URL"].rstrip("/")
TETHER_AUTH_URL = os.environ["TETHER_AUTH_URL"].rstrip("/")
# Only test_console.py needs it (gateway/tests/e2e/web_origins.rs does not set it).
TETHER_APPROVALS_URL = os.environ.get("TETHER_APPROVALS_URL", "").rstrip("/")

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def post(base: str, path: str, body, key: str | None = None):
    """POSTs JSON; returns (status, headers, parsed body)."""
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, dict(r.headers), json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read() or b"null")


def control(action: str, body: dict, base: str = TETHER_URL, key: str | None = None) -> dict:
    """A control action that must succeed: its Data."""
    status, _, envelope = post(base, f"/agentengine/api/v1/{action}", body, key)
    assert status == 200 and envelope["Code"] == 0, (action, status, envelope)
    return envelope["Data"]


def turn(session: str, text, base: str = TETHER_URL, key: str | None = None) -> dict:
    """One non-streaming turn on /v1/responses."""
    status, headers, body = post(base, "/v1/responses", {"model": "fake", "conversation": session, "input": text}, key)
    assert status == 200, body
    return body


def events(session: str, base: str = TETHER_URL, key: str | None = None) -> list[dict]:
    return control("ListSessionEvents", {"SessionId": session, "Limit": 500}, base, key)["Events"]


@pytest.fixture(scope="session")
def browser() -> Browser:
    executable = os.environ.get("CHROMIUM") or shutil.which("chromium")
    assert executable, "Debian's chromium is required (apt-get install chromium)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        yield b
        b.close()


class Recorder:
    """Every request a page made, and every uncaught error in it."""

    def __init__(self):
        self.requests: list[tuple[str, str, dict]] = []
        self.errors: list[str] = []

    def other_hosts(self, origins: set[str]) -> list[str]:
        out = []
        for method, url, _ in self.requests:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme in ("data", "blob"):
                continue
            if f"{parts.scheme}://{parts.netloc}" not in origins:
                out.append(f"{method} {url}")
        return out


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def open_page(browser: Browser, recorder: Recorder, origin: str) -> Page:
    context = browser.new_context(viewport={"width": 1400, "height": 880}, base_url=origin)
    context.set_default_timeout(15_000)
    context.on("request", lambda r: recorder.requests.append((r.method, r.url, r.headers)))
    page = context.new_page()
    page.on("pageerror", lambda e: recorder.errors.append(str(e)))
    return page


def checked_page(browser: Browser, recorder: Recorder, origin: str):
    """A fresh context on `origin`; afterwards, no uncaught error and no other host."""
    p = open_page(browser, recorder, origin)
    yield p
    p.context.close()
    assert not recorder.errors, recorder.errors
    assert not recorder.other_hosts({origin}), recorder.other_hosts({origin})


@pytest.fixture
def page(browser: Browser, recorder: Recorder):
    """A fresh browser context on the gateway without [auth]. Afterwards: no uncaught
    error, and no request to any other host."""
    yield from checked_page(browser, recorder, TETHER_URL)


@pytest.fixture
def approvals_page(browser: Browser, recorder: Recorder):
    """`page`, on the gateway in front of the Responses agent (approvals)."""
    yield from checked_page(browser, recorder, TETHER_APPROVALS_URL)


@pytest.fixture
def auth_pages(browser: Browser, recorder: Recorder):
    """Two fresh contexts (two people) on the gateway with [auth]."""
    pages = [open_page(browser, recorder, TETHER_AUTH_URL) for _ in range(2)]
    yield pages
    for p in pages:
        p.context.close()
    assert not recorder.errors, recorder.errors
    assert not recorder.other_hosts({TETHER_AUTH_URL}), recorder.other_hosts({TETHER_AUTH_URL})
