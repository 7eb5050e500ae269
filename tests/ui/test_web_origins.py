"""A web page from another origin against Tether, in a real browser (Debian's chromium
through Playwright): it tries DNS-rebinding-style requests (its own origin's name resolved
to Tether's loopback address), cross-site requests a page can make without CORS
(no-cors fetches, form posts, images) and opening uploaded SVG and HTML files; nothing
runs, nothing changes. The gateway's own origins keep working: the console on loopback,
and a deployment reached by a name in `allowed_hosts` with `[auth]`.

Started by `gateway/tests/e2e/web_origins.rs::a_page_from_another_origin_gets_nothing_in_a_real_browser`:

  TETHER_URL        a gateway on loopback, no [auth], SVG and HTML uploads allowed,
                    workspace_dir = TETHER_WORKSPACE
  TETHER_AUTH_URL   a gateway with [auth] (TETHER_KEY_A) and allowed_hosts = gw.test
  TETHER_AGENT_URL  the fake agent behind both (what it received)
  CHROMIUM          the browser's executable

The browser resolves every `*.test` name to 127.0.0.1 (`--host-resolver-rules`), which is
what a rebinding attacker's DNS does; the attacker's pages themselves are served by
Playwright's routing (no other server is needed), so no request leaves the machine.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from conftest import CHROMIUM_FLAGS, TETHER_AUTH_URL, TETHER_URL, control, post

KEY_A = os.environ["TETHER_KEY_A"]
AGENT_URL = os.environ["TETHER_AGENT_URL"].rstrip("/")
PORT = urllib.parse.urlsplit(TETHER_URL).port
AUTH_PORT = urllib.parse.urlsplit(TETHER_AUTH_URL).port

# What a page's script would do if it ever ran in Tether's origin: start a run.
PAYLOAD = (
    "fetch('/v1/responses',{method:'POST',headers:{'content-type':'application/json'},"
    "body:JSON.stringify({model:'m',input:'PWNED'})})"
)


@pytest.fixture(scope="module")
def browser() -> Browser:
    executable = os.environ.get("CHROMIUM") or shutil.which("chromium")
    assert executable, "Debian's chromium is required (apt-get install chromium)"
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=executable,
            args=CHROMIUM_FLAGS
            + [
                "--host-resolver-rules=MAP *.test 127.0.0.1",
                # Chromium's own Local Network Access checks would block a public page's
                # requests to loopback before Tether sees them; other browsers and older
                # ones have no such checks, so this test shows what Tether refuses itself.
                "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,"
                "PrivateNetworkAccessSendPreflights,PrivateNetworkAccessRespectPreflightResults",
            ],
        )
        yield b
        b.close()


def agent_inputs() -> list[str]:
    """Every model request the agent received, as text (to look for the payload)."""
    with urllib.request.urlopen(AGENT_URL + "/_requests", timeout=10) as r:
        return [json.dumps(x) for x in json.loads(r.read())]


def state() -> tuple[int, int]:
    """The `local` account's sessions and the agent's model requests."""
    total = control("ListSessions", {"PageSize": 1})["Total"]
    return total, len(agent_inputs())


def session_of(answer) -> str:
    status, headers, _ = answer
    assert status == 200, answer
    return {k.lower(): v for k, v in headers.items()}["x-session-id"]


def attacker_page(browser: Browser, origin: str, script: str):
    """A page of `origin` (served by Playwright's routing) running `script`, and every
    response the browser got from Tether's port meanwhile."""
    context = browser.new_context()
    context.set_default_timeout(15_000)
    page = context.new_page()
    seen: list[tuple[str, str, int]] = []
    page.on("response", lambda r: seen.append((r.request.method, r.url, r.status)))
    html = f"<!doctype html><title>attacker</title><script>window.done = (async () => {{ {script} }})();</script>"
    page.route(f"{origin}/attack.html", lambda route: route.fulfill(status=200, content_type="text/html", body=html))
    page.goto(f"{origin}/attack.html")
    results = page.evaluate("window.done")
    return context, page, results, [s for s in seen if not s[1].endswith("/attack.html")]


def tries(calls: list[str]) -> str:
    """JS that runs each call and collects what the page could see of it."""
    body = ",".join(
        f"(async () => {{ try {{ const r = await {c}; return r.type === 'opaque' ? 'opaque' : r.status; }}"
        f" catch (e) {{ console.log(String(e)); return 'blocked'; }} }})()"
        for c in calls
    )
    return f"return await Promise.all([{body}]);"


def test_a_rebinding_page_gets_421_for_everything(browser: Browser):
    session = session_of(post(TETHER_URL, "/v1/responses", {"model": "m", "input": "secret plans"}))
    before = state()
    origin = f"http://rebind.test:{PORT}"
    # Same-origin requests, as far as the page can tell: its name now points at 127.0.0.1.
    calls = [
        "fetch('/agentengine/api/v1/ListSessions',{method:'POST',headers:{'content-type':'application/json'},body:'{}'})",
        f"fetch('/agentengine/api/v1/ListSessionEvents',{{method:'POST',headers:{{'content-type':'application/json'}},body:JSON.stringify({{SessionId:'{session}'}})}})",
        "fetch('/v1/responses',{method:'POST',headers:{'content-type':'application/json'},body:JSON.stringify({model:'m',input:'PWNED'})})",
        "fetch('/ui/')",
        "fetch('/healthz')",
        "fetch('/echo')",
    ]
    context, _, results, seen = attacker_page(browser, origin, tries(calls))
    context.close()
    assert results == [421] * len(calls), results
    assert seen and all(status == 421 for _, _, status in seen), seen
    assert state() == before
    assert not any("PWNED" in r for r in agent_inputs())


def test_a_cross_site_page_changes_nothing_and_reads_nothing(browser: Browser):
    session = session_of(post(TETHER_URL, "/v1/responses", {"model": "m", "input": "my secret"}))
    before = state()
    events_before = len(control("ListSessionEvents", {"SessionId": session, "Limit": 500})["Events"])
    t = TETHER_URL
    calls = [
        # Simple requests, sent without a preflight; the page could not read the answer
        # anyway, but they must not act.
        f"fetch('{t}/v1/responses',{{method:'POST',mode:'no-cors',headers:{{'content-type':'text/plain'}},body:JSON.stringify({{model:'m',input:'PWNED'}})}})",
        f"fetch('{t}/agentengine/api/v1/ImportSession',{{method:'POST',mode:'no-cors',body:JSON.stringify({{SessionId:'pwned',Events:[{{SeqId:1,EventType:'message',Content:{{text:'PWNED'}},Timestamp:'2026-01-01T00:00:00Z'}}]}})}})",
        f"fetch('{t}/agentengine/api/v1/CompactSession',{{method:'POST',mode:'no-cors',body:JSON.stringify({{SessionId:'{session}'}})}})",
        f"fetch('{t}/agentengine/api/v1/UploadAttachment',{{method:'POST',mode:'no-cors',body:JSON.stringify({{Data:'data:text/plain;base64,aGk='}})}})",
        # Reads: CORS requests, refused at the preflight or at the request.
        f"fetch('{t}/agentengine/api/v1/ListSessionEvents',{{method:'POST',headers:{{'content-type':'application/json'}},body:JSON.stringify({{SessionId:'{session}'}})}})",
        f"fetch('{t}/agentengine/api/v1/SubscribeRunEvents?SessionId={session}')",
    ]
    # Then a form posted to the control API in a hidden frame, and an image of a file.
    script = f"""
        const seen = await (async () => {{ {tries(calls)} }})();
        const frame = document.createElement('iframe'); frame.name = 'sink'; document.body.append(frame);
        const form = document.createElement('form');
        form.method = 'POST'; form.target = 'sink'; form.enctype = 'text/plain';
        form.action = '{t}/agentengine/api/v1/ForkSession';
        const field = document.createElement('input');
        field.name = '{{"SessionId":"{session}","NewSessionId":"pwned-fork","x":"'; field.value = '"}}';
        form.append(field); document.body.append(form);
        const posted = new Promise(ok => frame.onload = ok); form.submit(); await posted;
        const image = new Image();
        const loaded = new Promise(ok => {{ image.onload = () => ok('loaded'); image.onerror = () => ok('error'); }});
        image.src = '{t}/agentengine/api/v1/AttachmentContent?FileUri=' + encodeURIComponent('notes/todo.txt');
        return seen.concat([await loaded]);
    """
    context, _, results, seen = attacker_page(browser, "http://evil.test:9", script)
    context.close()
    assert results == ["opaque"] * 4 + ["blocked"] * 2 + ["error"], results
    # The answers the browser reports (not those of preflights, failed CORS requests or
    # images): the four no-cors fetches and the form, each refused.
    to_tether = [(m, u, s) for m, u, s in seen if u.startswith(t)]
    assert len(to_tether) >= 5, seen
    assert all(s == 403 for _, _, s in to_tether), to_tether
    assert state() == before
    assert len(control("ListSessionEvents", {"SessionId": session, "Limit": 500})["Events"]) == events_before
    status, _, _ = post(TETHER_URL, "/agentengine/api/v1/ListSessionEvents", {"SessionId": "pwned-fork"})
    assert status == 404
    assert not any("PWNED" in r for r in agent_inputs())


def upload(mime: str, content: str, name: str) -> str:
    data = base64.b64encode(content.encode()).decode()
    return control("UploadAttachment", {"Data": f"data:{mime};base64,{data}", "FileName": name})["FileUri"]


def test_uploaded_svg_and_html_opened_in_the_gateways_origin_run_nothing(browser: Browser):
    svg = upload(
        "image/svg+xml",
        f'<svg xmlns="http://www.w3.org/2000/svg" onload="{PAYLOAD}"><script>{PAYLOAD}</script></svg>',
        "pic.svg",
    )
    html = upload("text/html", f"<!doctype html><script>{PAYLOAD}</script><h1>hi</h1>", "page.html")
    (Path(os.environ["TETHER_WORKSPACE"]) / "local").mkdir(parents=True, exist_ok=True)
    (Path(os.environ["TETHER_WORKSPACE"]) / "local" / "ws.html").write_text(f"<script>{PAYLOAD}</script>")
    before = state()
    context = browser.new_context(accept_downloads=True)
    context.set_default_timeout(15_000)
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(f"{r.method} {r.url}"))
    page.goto(f"{TETHER_URL}/ui/")
    for uri in (svg, html):
        url = f"{TETHER_URL}/agentengine/api/v1/AttachmentContent?FileUri={urllib.parse.quote(uri, safe='')}"
        # Opened as a page: a download, never a document of Tether's origin.
        with page.expect_download() as download:
            page.evaluate("url => { const a = document.createElement('a'); a.href = url; document.body.append(a); a.click(); }", url)
        assert download.value.suggested_filename in ("pic.svg", "page.html")
        # Embedded in the console's own origin: an <img> of the SVG runs no script.
        page.evaluate(
            "url => new Promise(ok => { const i = new Image(); i.onload = i.onerror = ok; i.src = url; document.body.append(i); })",
            url,
        )
        # In a frame: still a download (and sandboxed if it were shown).
        page.evaluate("url => { const f = document.createElement('iframe'); f.src = url; document.body.append(f); }", url)
    # A workspace HTML file is shown as the text it is.
    ws = context.new_page()
    ws.goto(f"{TETHER_URL}/agentengine/api/v1/AttachmentContent?FileUri=ws.html")
    expect(ws.locator("body")).to_contain_text("<script>fetch(")
    page.wait_for_timeout(1000)
    context.close()
    assert not [r for r in requests if "/v1/responses" in r], requests
    assert state() == before
    assert not any("PWNED" in r for r in agent_inputs())


def test_the_gateways_own_origins_still_work(browser: Browser):
    # The console on loopback.
    context = browser.new_context()
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.goto(f"{TETHER_URL}/ui/")
    page.get_by_role("textbox", name="Message").fill("Reply with OK")
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page.locator("li.msg-assistant:not(.live) .bubble .text")).to_have_text(["OK."])
    context.close()
    # A deployment reached by its name (allowed_hosts) with [auth].
    context = browser.new_context()
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.goto(f"http://gw.test:{AUTH_PORT}/ui/")
    expect(page.get_by_role("dialog", name="Sign in to Tether")).to_be_visible()
    page.get_by_label("API key or token").fill(KEY_A)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.get_by_role("textbox", name="Message").fill("Reply with OK")
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page.locator("li.msg-assistant:not(.live) .bubble .text")).to_have_text(["OK."])
    expect(page.locator(".agent-info")).to_contain_text("account acct-a")
    # The same gateway by a name it was not given: refused before the console loads.
    other = context.new_page()
    response = other.goto(f"http://other.test:{AUTH_PORT}/ui/")
    assert response.status == 421
    context.close()
