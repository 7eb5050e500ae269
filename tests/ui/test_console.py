"""The sessions console in a real browser (Debian's chromium through Playwright), against
the real gateway and tests/fake_agent.py. Each test drives the page by its accessible
names, as a person or a screen reader would, and checks what the log holds afterwards.
Every test also fails if the page threw an error or requested any other host (see the
fixtures in conftest.py)."""

from __future__ import annotations

import base64
import json
import os
import re
import sqlite3
import struct
import urllib.request
import uuid
import zlib
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from conftest import TETHER_APPROVALS_URL, TETHER_AUTH_URL, TETHER_URL, control, events, turn

KEY_A = os.environ["TETHER_KEY_A"]
KEY_B = os.environ["TETHER_KEY_B"]


def words(n: int) -> str:
    return "".join(f"w{i} " for i in range(1, n + 1))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def png(width: int, height: int) -> bytes:
    """A small real PNG (a blue-violet gradient), made here so nothing is fetched."""
    rows = b"".join(
        b"\0" + b"".join(bytes((40 + x * 2 % 120, 70 + y * 3 % 100, 200)) for x in range(width)) for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


@pytest.fixture(scope="session", autouse=True)
def workspace():
    """The `local` account's workspace files."""
    root = Path(os.environ["TETHER_WORKSPACE"]) / "local"
    (root / "notes").mkdir(parents=True, exist_ok=True)
    (root / "notes" / "todo.txt").write_text("buy milk\nship the console\n")
    (root / "notes" / "plan.md").write_text("# Plan\n\n1. Record every event.\n2. Show them.\n")
    (root / "chart.png").write_bytes(png(96, 60))
    (root / "report.pdf").write_bytes(b"%PDF-1.7\n% demo\n")
    return root


def open_session(page: Page, session: str):
    page.goto(f"/ui/#/sessions/{session}")
    expect(page.locator(".session-id")).to_have_text(session)


def assistant_answers(page: Page):
    return page.locator("li.msg-assistant:not(.live) .bubble .text")


def test_a_session_made_through_the_api_shows_its_messages(page: Page):
    session = unique("api-made")
    turn(session, "My project is named zebra42. Reply with OK.")
    turn(session, "What is my project named?")
    page.goto("/ui/")
    link = page.get_by_role("link", name=session, exact=True)
    expect(link).to_be_visible()
    link.click()
    expect(page).to_have_url(re.compile(f"#/sessions/{session}$"))
    expect(page.locator("li.msg-user .text")).to_have_text(["My project is named zebra42. Reply with OK.", "What is my project named?"])
    expect(assistant_answers(page)).to_have_text(["OK.", "zebra42"])
    # Every event of the log is on the page once, in seq order.
    seqs = [int(s) for s in page.locator("li[data-seq]").evaluate_all("els => els.map(e => e.dataset.seq)")]
    assert seqs == sorted(set(seqs))
    assert seqs[-1] == events(session)[-1]["SeqId"]
    expect(page.locator(".session-link[aria-current=page]")).to_have_text(session)


def test_send_shows_the_streamed_answer(page: Page):
    page.goto("/ui/")
    page.get_by_role("textbox", name="Message").fill("slow:12:120")
    page.get_by_role("button", name="Send", exact=True).click()
    # The page moves to the new session and shows the answer while it streams.
    expect(page).to_have_url(re.compile(r"#/sessions/sess_[0-9a-f]+$"))
    live = page.locator('[data-live="true"] .text')
    expect(live).to_contain_text("w3")
    assert live.text_content().strip() != words(12).strip(), "seen before it was complete"
    expect(assistant_answers(page)).to_have_text([words(12).strip()])
    expect(page.locator(".header-status .badge")).to_have_text("completed")
    expect(live).to_have_count(0)
    session = page.url.rsplit("/", 1)[1]
    statuses = [e["Content"]["status"] for e in events(session) if e["EventType"] == "run_status"]
    assert statuses == ["in_progress", "completed"]


def test_a_reload_in_the_middle_of_a_stream_finishes_it_exactly_once(page: Page):
    # Every text the live answer shows, from the first script on (reloads included).
    page.add_init_script(
        """
        window.__live = [];
        new MutationObserver(() => {
          const el = document.querySelector('[data-live="true"] .text');
          if (el) window.__live.push(el.textContent);
        }).observe(document, { subtree: true, childList: true, characterData: true });
        """
    )
    expected = words(30)
    page.goto("/ui/")
    page.get_by_role("textbox", name="Message").fill("slow:30:100")
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page.locator('[data-live="true"] .text')).to_contain_text("w5 ")
    session = page.url.rsplit("/", 1)[1]
    page.reload()
    expect(page.locator(".session-id")).to_have_text(session)
    expect(assistant_answers(page)).to_have_text([expected.strip()], timeout=20_000)
    seen = page.evaluate("window.__live")
    assert seen, "the run was still streaming after the reload"
    assert any(len(t) < len(expected) for t in seen), "re-attached while it was still running"
    for text in seen:
        assert expected.startswith(text), f"neither duplicated nor lost: {text!r}"
    # The deltas the page shows add up to the answer once: none twice, none missing.
    deltas = page.locator('li[data-type="text_delta"] pre').all_text_contents()
    assert "".join(deltas) == expected
    expect(page.locator("li.msg-assistant")).to_have_count(1)
    seqs = [int(s) for s in page.locator("li[data-seq]").evaluate_all("els => els.map(e => e.dataset.seq)")]
    log = events(session)
    assert seqs[-1] == log[-1]["SeqId"] and len(seqs) == len(set(seqs))


def test_cancel_stops_a_slow_run(page: Page):
    page.goto("/ui/")
    page.get_by_role("textbox", name="Message").fill("slow:80:100")
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page.locator('[data-live="true"] .text')).to_contain_text("w2 ")
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_disabled()
    page.get_by_role("button", name="Cancel", exact=True).click()
    expect(page.locator(".header-status .badge")).to_have_text("cancelled")
    expect(page.get_by_role("button", name="Cancel", exact=True)).to_be_hidden()
    expect(page.locator("li.partial .typing")).to_have_text("partial answer (run cancelled)")
    session = page.url.rsplit("/", 1)[1]
    statuses = [e["Content"]["status"] for e in events(session) if e["EventType"] == "run_status"]
    assert statuses == ["in_progress", "cancelled"]
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_enabled()


def tool_session() -> str:
    session = unique("tools")
    turn(session, "tool:lookup")
    turn(session, [{"type": "function_call_output", "call_id": "call_1", "output": "42"}])
    return session


def test_resume_through_its_button(page: Page):
    session = tool_session()
    open_session(page, session)
    page.get_by_role("tab", name="Checkpoints").click()
    # Newest first: the after-tool-result checkpoint of the second run.
    page.get_by_role("button", name="Preview", exact=True).first.click()
    expect(page.locator(".checkpoint-preview")).to_contain_text("Risk")
    page.get_by_label("Resume instruction").fill("Reply with OK")
    page.get_by_role("button", name="Resume", exact=True).click()
    expect(page.locator(".event-status .what").last).to_contain_text("Run completed")
    expect(page.locator(".event-status .what", has_text="Run resumed")).to_have_count(1)
    expect(assistant_answers(page).last).to_have_text("OK.")
    resumed = [e for e in events(session) if e["EventType"] == "run_status" and e["Metadata"].get("resumed_from_checkpoint")]
    assert len(resumed) == 1


def test_resume_is_offered_only_where_bootstrap_allows_it(page: Page):
    session = unique("plain")
    turn(session, "Reply with OK")
    assert control("GetAgentUiBootstrap", {"SessionId": session})["RunLifecycle"]["Checkpoints"] is False
    open_session(page, session)
    expect(page.locator(".checkpoint")).to_have_count(1)
    expect(page.get_by_role("button", name="Preview", exact=True)).to_have_count(0)
    expect(page.get_by_role("button", name="Resume", exact=True)).to_have_count(0)
    expect(page.get_by_text("No checkpoint of this session can be resumed now.")).to_be_visible()


def test_fork_through_its_button_makes_a_session_that_knows_the_earlier_turn(page: Page):
    # In front of an OpenAI agent both are offered (the agent writes compaction summaries).
    features = control("GetAgentUiBootstrap", {})["Features"]
    assert features["Fork"] and features["Compaction"], features
    session = unique("fork-parent")
    turn(session, "My project is named zebra42. Reply with OK.")
    turn(session, "My project is now named koala7. Reply with OK.")
    turn_one = control("ListSessionCheckpoints", {"SessionId": session})["Checkpoints"][0]
    open_session(page, session)
    page.get_by_role("tab", name="Checkpoints").click()
    # Newest first: the last card is the checkpoint that ended turn 1.
    expect(page.locator(".checkpoint")).to_have_count(2)
    page.locator(".checkpoint").last.get_by_role("button").click()
    expect(page.locator(".checkpoint-preview")).to_contain_text(f"seq {turn_one['SeqId']}")
    page.get_by_role("button", name="Fork", exact=True).click()

    expect(page.locator(".session-id")).not_to_have_text(session)
    fork = page.url.rsplit("/", 1)[1]
    expect(page.locator(".session-id")).to_have_text(fork)
    expect(page.locator('li[data-type="session_fork"]')).to_have_text(
        re.compile(rf"Forked from {session} at seq {turn_one['SeqId']}")
    )
    # The fork shows what it inherited (turn 1), not what came after the fork point.
    expect(page.locator("li.msg-user.is-inherited .text")).to_have_text(["My project is named zebra42. Reply with OK."])
    # The sidebar lists it with its parent.
    item = page.locator(".session-item", has=page.get_by_role("link", name=fork, exact=True))
    expect(item.locator(".session-fork")).to_have_text(f"fork of {session}")
    listed = control("ListSessions", {"PageSize": 100})["Sessions"]
    assert [s["ForkedFrom"]["SessionId"] for s in listed if s["SessionId"] == fork] == [session]

    # The run the fork inherited is not the fork's: nothing to cancel, Send is ready.
    expect(page.get_by_role("button", name="Cancel", exact=True)).to_be_hidden()
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_enabled()
    # A turn in the fork, from its own composer: it knows turn 1 and not the later rename.
    page.get_by_role("textbox", name="Message").fill("What is my project named?")
    page.get_by_role("button", name="Send", exact=True).click()
    expect(assistant_answers(page).last).to_have_text("zebra42")
    assert turn(session, "What is my project named?")["output"][-1]["content"][0]["text"] == "koala7"


def test_compact_through_its_button_shows_the_boundary_in_the_timeline(page: Page):
    session = unique("compact")
    for text in ["My project is named zebra42. Reply with OK.", "The colour is teal.", "The size is large."]:
        turn(session, text)
    open_session(page, session)
    expect(assistant_answers(page)).to_have_count(3)
    page.get_by_role("button", name="Compact", exact=True).click()
    expect(page.locator(".notice")).to_contain_text("Compacted seq")
    # Both events show in the timeline as they are committed, without a reload or a
    # "Show control events": the boundary, and the checkpoint with its summary.
    boundary = page.locator('li[data-type="compaction_boundary"]')
    checkpoint = page.locator('li[data-type="context_checkpoint"]')
    expect(boundary).to_be_visible()
    expect(boundary).to_contain_text("Compaction boundary")
    log = events(session)
    saved = next(e for e in log if e["EventType"] == "context_checkpoint")["Content"]
    expect(checkpoint).to_be_visible()
    expect(checkpoint.locator("summary")).to_have_text(f"Summary of seq {saved['seq_start']}–{saved['seq_end']}")
    checkpoint.locator("summary").click()
    expect(checkpoint.locator(".text")).to_have_text(saved["summary"])
    assert "zebra42" in saved["summary"]
    # The default keeps the last two turns: turn 1 is what was summarised.
    boundary_event = next(e for e in log if e["EventType"] == "compaction_boundary")
    assert boundary_event["Content"]["keep_last_turns"] == 2
    # After a reload too, once each.
    page.reload()
    expect(boundary).to_have_count(1)
    expect(checkpoint).to_have_count(1)


def test_feedback_is_stored(page: Page):
    session = unique("feedback")
    answer = turn(session, "Reply with OK")
    open_session(page, session)
    good = page.get_by_role("button", name="Good answer", exact=True)
    good.click()
    page.get_by_role("textbox", name="Comment").fill("short and right")
    page.get_by_role("button", name="Send feedback", exact=True).click()
    expect(page.get_by_text("Thanks, feedback recorded.")).to_be_visible()
    expect(good).to_have_attribute("aria-pressed", "true")
    expect(page.get_by_role("button", name="Bad answer", exact=True)).to_have_attribute("aria-pressed", "false")

    listed = control("ListFeedback", {"SessionId": session})["Feedback"]
    assert [(f["Rating"], f["Comment"], f["ResponseId"]) for f in listed] == [("up", "short and right", answer["id"])]
    with sqlite3.connect(f"file:{os.environ['TETHER_STORE']}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT account_id, rating, comment, answer_text FROM feedback_readable WHERE session_id = ?", (session,)
        ).fetchall()
    assert rows == [("local", "up", "short and right", "OK.")]

    # After a reload the answer still shows its rating, and the panel lists it.
    page.reload()
    expect(page.get_by_role("button", name="Good answer", exact=True)).to_have_attribute("aria-pressed", "true")
    page.get_by_role("tab", name="Feedback").click()
    expect(page.locator(".feedback-item")).to_contain_text("short and right")


def test_an_upload_goes_with_the_message(page: Page):
    page.goto("/ui/")
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Upload", exact=True).click()
    chooser.value.set_files({"name": "notes.txt", "mimeType": "text/plain", "buffer": b"hello upload"})
    expect(page.locator(".composer .chip")).to_contain_text("notes.txt")
    page.get_by_role("textbox", name="Message").fill("read this")
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page.locator("li.msg-user .chip")).to_contain_text("notes.txt")
    expect(assistant_answers(page)).to_have_count(1)
    with urllib.request.urlopen(os.environ["TETHER_AGENT_URL"] + "/_requests") as r:
        received = r.read().decode()
    assert base64.b64encode(b"hello upload").decode() in received, "the agent got the file as a data URL"


def test_workspace_files_panel(page: Page):
    page.goto("/ui/")
    page.get_by_role("tab", name="Files").click()
    files = page.get_by_role("list", name="Workspace files")
    files.get_by_role("button", name=re.compile("^notes")).click()
    files.get_by_role("button", name=re.compile("^todo.txt")).click()
    expect(page.locator(".preview-text")).to_have_text("buy milk\nship the console\n")
    page.get_by_role("button", name="workspace", exact=True).click()
    files.get_by_role("button", name=re.compile("^chart.png")).click()
    image = page.get_by_role("img", name="chart.png")
    expect(image).to_be_visible()
    assert image.evaluate("img => img.complete && img.naturalWidth") == 96
    files.get_by_role("button", name=re.compile("^report.pdf")).click()
    expect(page.locator(".file-preview")).to_contain_text("No preview for this type")


def enter_key(page: Page, key: str):
    expect(page.get_by_role("dialog", name="Sign in to Tether")).to_be_visible()
    page.get_by_label("API key or token").fill(key)
    page.get_by_role("button", name="Sign in", exact=True).click()


def sign_in(page: Page, key: str):
    enter_key(page, key)
    expect(page.get_by_role("dialog", name="Sign in to Tether")).to_be_hidden()


def test_a_second_account_sees_none_of_the_first_accounts_sessions(auth_pages, recorder):
    alice, bob = auth_pages
    alice.goto("/ui/")
    # A wrong key is refused, then the right one is asked for again.
    enter_key(alice, "not-a-key")
    expect(alice.get_by_role("alert").filter(has_text="Refused:")).to_be_visible()
    sign_in(alice, KEY_A)
    alice.get_by_role("textbox", name="Message").fill("Reply with OK")
    alice.get_by_role("button", name="Send", exact=True).click()
    expect(alice).to_have_url(re.compile(r"#/sessions/sess_[0-9a-f]+$"))
    session = alice.url.rsplit("/", 1)[1]
    expect(assistant_answers(alice)).to_have_text(["OK."])
    expect(alice.get_by_role("link", name=session, exact=True)).to_be_visible()
    expect(alice.locator(".agent-info")).to_contain_text("account acct-a")

    bob.goto("/ui/")
    sign_in(bob, KEY_B)
    expect(bob.locator(".agent-info")).to_contain_text("account acct-b")
    expect(bob.locator(".session-list")).to_contain_text("No sessions yet")
    expect(bob.get_by_role("link", name=session)).to_have_count(0)
    bob.goto(f"/ui/#/sessions/{session}")
    expect(bob.locator(".notice")).to_have_text(f"Session {session} not found.")
    expect(bob.get_by_text("OK.", exact=True)).to_have_count(0)

    # The credential lives in the tab's sessionStorage and travels only as a header.
    assert alice.evaluate("sessionStorage.getItem('tether.credential')") == KEY_A
    assert alice.evaluate("localStorage.length") == 0
    api = [(m, u, h) for m, u, h in recorder.requests if "/agentengine/" in u or "/v1/" in u]
    assert api, "the pages called the API"
    for _, url, headers in recorder.requests:
        assert KEY_A not in url and KEY_B not in url, url
    sent = {h.get("authorization") for _, _, h in api}
    assert {f"Bearer {KEY_A}", f"Bearer {KEY_B}"} <= sent


def tool_runs() -> list[dict]:
    """The tools the Responses agent ran, in order (its --tool-log)."""
    path = Path(os.environ["TETHER_TOOL_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_pending_approval_is_approved_in_the_console(approvals_page: Page):
    page = approvals_page
    session = unique("approve")
    body = turn(session, "approve:deploy", base=TETHER_APPROVALS_URL)
    [request] = [o for o in body["output"] if o["type"] == "mcp_approval_request"]
    before = [r for r in tool_runs() if r["approval_request_id"] == request["id"]]
    assert before == [], "nothing ran before the decision"

    page.goto("/ui/")
    item = page.locator(".session-item").filter(has=page.get_by_role("link", name=session, exact=True))
    expect(item.locator(".badge-approval")).to_have_text("1 approval")
    item.get_by_role("link", name=session, exact=True).click()
    panel = page.get_by_role("region", name="Pending approvals")
    approval = panel.locator(".approval")
    expect(approval).to_have_count(1)
    expect(approval.locator(".approval-tool")).to_have_text("deploy")
    expect(approval.locator(".badge")).to_have_text("approval")
    expect(approval.locator(".approval-arguments")).to_have_text('{\n  "x": 1\n}')
    expect(approval).to_contain_text("requested ")
    # A Responses answer has no field for edited arguments: no editor is offered.
    expect(approval.get_by_role("textbox", name="Arguments (JSON)")).to_have_count(0)
    approval.get_by_role("textbox", name="Comment").fill("ship it")
    approval.get_by_role("button", name="Approve", exact=True).click()

    # The answer's run streams into the session the page follows.
    expect(assistant_answers(page).last).to_have_text('deploy ran with {"x": 1}', timeout=20_000)
    expect(approval).to_have_count(0)
    expect(panel.get_by_role("status")).to_contain_text("Approved deploy")
    expect(item.locator(".badge-approval")).to_have_count(0, timeout=10_000)
    runs = [r for r in tool_runs() if r["approval_request_id"] == request["id"]]
    assert runs == [{"tool": "deploy", "arguments": '{"x": 1}', "approval_request_id": request["id"]}], runs
    pending = control("ListPendingApprovals", {"SessionId": session}, base=TETHER_APPROVALS_URL)
    assert pending["Total"] == 0 and pending["Approvals"] == [], pending
    [resolved] = [e for e in events(session, base=TETHER_APPROVALS_URL) if e["EventType"] == "approval_resolved"]
    assert resolved["Content"]["decision"] == "approve", resolved
    assert resolved["Content"].get("comment") == "ship it", resolved


def test_an_approval_resolved_elsewhere_is_shown_as_already_resolved(approvals_page: Page):
    page = approvals_page
    session = unique("approve-twice")
    body = turn(session, "approve:wipe", base=TETHER_APPROVALS_URL)
    [request] = [o for o in body["output"] if o["type"] == "mcp_approval_request"]
    # The page stops hearing the session (a dropped stream), so it still offers the
    # request when someone else has answered it.
    page.route("**/SubscribeRunEvents*", lambda route: route.abort())
    open_session(page, session)
    approval = page.get_by_role("region", name="Pending approvals").locator(".approval")
    expect(approval.locator(".approval-tool")).to_have_text("wipe")
    control("ResolveApproval", {"SessionId": session, "RequestId": request["id"], "Decision": "approve"}, base=TETHER_APPROVALS_URL)
    approval.get_by_role("button", name="Reject", exact=True).click()
    expect(page.get_by_role("region", name="Pending approvals").get_by_role("status")).to_have_text(
        "wipe was already resolved (approve by local): your decision was not applied."
    )
    expect(approval).to_have_count(0)
    [resolved] = [e for e in events(session, base=TETHER_APPROVALS_URL) if e["EventType"] == "approval_resolved"]
    assert resolved["Content"]["decision"] == "approve", resolved
    page.unroute("**/SubscribeRunEvents*")


def test_the_page_requests_no_other_host(page: Page, recorder):
    session = tool_session()
    page.goto("/ui/")
    page.get_by_role("link", name=session, exact=True).click()
    expect(assistant_answers(page)).to_have_count(1)
    page.get_by_role("button", name="Preview", exact=True).first.click()
    expect(page.locator(".checkpoint-preview")).to_contain_text("Risk")
    page.get_by_role("tab", name="Files").click()
    page.get_by_role("list", name="Workspace files").get_by_role("button", name=re.compile("^chart.png")).click()
    expect(page.get_by_role("img", name="chart.png")).to_be_visible()
    page.get_by_role("textbox", name="Message").fill("Reply with OK")
    page.get_by_role("button", name="Send", exact=True).click()
    expect(assistant_answers(page)).to_have_count(2)
    urls = [u for _, u, _ in recorder.requests]
    for path in ["/ui/", "/ui/js/app.js", "/ui/style.css", "/agentengine/api/v1/SubscribeRunEvents", "/v1/responses"]:
        assert any(u.startswith(TETHER_URL + path) for u in urls), f"{path} was requested: {urls}"
    # The fixture then checks that every one of them went to this gateway.


def test_screenshots_of_a_demo_session(page: Page):
    """The README's pictures: a demo conversation with a tool call, reasoning and
    feedback; a checkpoint's resume preview; the workspace files."""
    out = Path(os.environ["TETHER_SCREENSHOTS"])
    out.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1280, "height": 800})
    session = unique("demo")
    turn(session, "My project is named zebra42. Reply with OK.")
    turn(session, "tool:lookup")
    turn(session, [{"type": "function_call_output", "call_id": "call_1", "output": "42"}])
    turn(session, "reason What is my project named?")
    open_session(page, session)
    expect(assistant_answers(page)).to_have_count(3)
    page.get_by_role("button", name="Good answer", exact=True).last.click()
    page.get_by_role("textbox", name="Comment").last.fill("Remembered across turns.")
    page.get_by_role("button", name="Send feedback", exact=True).click()
    expect(page.get_by_text("Thanks, feedback recorded.")).to_be_visible()
    page.locator("li.event-reasoning details").last.evaluate("d => d.open = true")
    page.locator(".timeline-scroll").evaluate("s => s.scrollTop = s.scrollHeight")
    page.screenshot(path=str(out / "console-session.png"))

    page.get_by_role("button", name="Preview", exact=True).first.click()
    page.get_by_label("Resume instruction").fill("Answer in one word.")
    expect(page.locator(".checkpoint-preview")).to_contain_text("Risk")
    page.locator(".timeline-scroll").evaluate("s => s.scrollTop = s.scrollHeight / 3")
    page.screenshot(path=str(out / "console-resume.png"))

    page.get_by_role("tab", name="Files").click()
    page.get_by_role("list", name="Workspace files").get_by_role("button", name=re.compile("^notes")).click()
    page.get_by_role("list", name="Workspace files").get_by_role("button", name=re.compile("^plan.md")).click()
    expect(page.locator(".preview-text")).to_contain_text("Record every event")
    page.screenshot(path=str(out / "console-files.png"))
    for name in ["console-session.png", "console-resume.png", "console-files.png"]:
        assert (out / name).stat().st_size > 10_000
