"""Shared helpers for the A2A and ADK interop tests: the agent processes and Tether's log.

The agents under test keep everything in memory, so "restart" is the whole point: each
helper starts a real agent process on a fixed port (the one Tether's `--upstream` names),
kills it (SIGKILL, losing what it held) and starts it again on the same port.

Environment (set by gateway/tests/e2e/agents.rs):
  AGENT_PORT      the port the agent must listen on (Tether's upstream)
  FAKE_LLM_URL    base URL of tests/fake_agent.py, the agents' LLM (http://127.0.0.1:P;
                  a trailing /v1 is accepted)
  TETHER_URL      Tether's base URL
  TETHER_API_KEY  / TETHER_API_KEY_B: callers' API keys when Tether requires them

Each agent runs in its own process group (start_new_session), so kill() reaches every
process it forked; anything still running when the interpreter exits is killed too.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
AGENTS_DIR = REPO / "tests" / "agents"
START_TIMEOUT = 60.0

_live: set["AgentProcess"] = set()


def env(name: str) -> str:
    return os.environ.get(name, "").strip()


def fake_llm_base() -> str:
    url = env("FAKE_LLM_URL").rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def missing_env(*names: str) -> list[str]:
    return [n for n in names if not env(n)]


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class AgentProcess:
    """One agent process on a fixed port; restart() brings up a fresh one on that port."""

    name = "agent"

    def __init__(self, port: int):
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.log_path = Path(tempfile.mkstemp(prefix=f"tether-{self.name}-", suffix=".log")[1])
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ---- what a subclass says -----------------------------------------------------------

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict:
        return dict(os.environ)

    def workdir(self) -> Path:
        """The working directory of one start."""
        return REPO

    def wait_ready(self, deadline: float) -> None:
        raise NotImplementedError

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> "AgentProcess":
        assert self.proc is None, f"{self.name} already running"
        for port in (self.port, getattr(self, "grpc_port", None)):
            if port:
                wait_for(lambda: port_is_free(port), 10, f"port {port} to be free for {self.name}")
        with open(self.log_path, "a") as log:
            log.write(f"\n===== start #{self.starts + 1}: {' '.join(self.command())}\n")
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.workdir(),
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
                text=True,
            )
        _live.add(self)
        self.starts += 1
        try:
            self.wait_ready(time.monotonic() + START_TIMEOUT)
        except BaseException:
            self.kill()
            raise
        return self

    def kill(self) -> None:
        """SIGKILL the whole process group: everything the agent held in memory is gone."""
        proc, self.proc = self.proc, None
        _live.discard(self)
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()

    def restart(self) -> None:
        self.kill()
        self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, chars: int = 4000, since: int = 0) -> str:
        """The end of the agent's stderr (all its starts), from byte `since` on."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                return f.read().decode(errors="replace")[-chars:]
        except OSError:
            return ""

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def ensure_running(self) -> "AgentProcess":
        """Starts the agent unless it runs (e.g. a failed test left it killed)."""
        if not self.alive():
            self.kill()
            self.start()
        return self

    def wait_answering(self, path: str, deadline: float) -> None:
        """Waits until GET `path` answers 200 (a failed start is reported with its log)."""
        while time.monotonic() < deadline:
            self._check_running()
            try:
                if httpx.get(f"{self.url}{path}", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer {path} in time:\n{self.log_tail()}")

    def _check_running(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with {self.proc.returncode} while starting:\n{self.log_tail()}"
            )


class ReadyLineAgent(AgentProcess):
    """An agent that prints `READY <port>` on stdout once it listens."""

    def wait_ready(self, deadline: float) -> None:
        # Read the line off the main thread so a hung process cannot hang the test past
        # the deadline.
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(max(0.0, deadline - time.monotonic()))
        self._check_running()
        if not line or not line[0].startswith("READY"):
            raise RuntimeError(f"{self.name} did not print READY: {line!r}\n{self.log_tail()}")


class FakeAgent(ReadyLineAgent):
    """tests/fake_agent.py itself as the agent (an OpenAI agent that remembers nothing)."""

    name = "fake-agent"

    def command(self) -> list[str]:
        return [sys.executable, str(REPO / "tests" / "fake_agent.py"), "--port", str(self.port)]


class A2aAgent(ReadyLineAgent):
    """tests/agents/a2a_agent.py (a2a-sdk, in-memory task store and histories); with
    `grpc_port`, it also serves gRPC there, and its card lists that interface; `extra`:
    more of its options (`--mount /PREFIX`, `--v03-only`)."""

    name = "a2a-agent"

    def __init__(self, port: int, grpc_port: int | None = None, extra: tuple[str, ...] = ()):
        super().__init__(port)
        self.grpc_port = grpc_port
        self.extra = extra

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def command(self) -> list[str]:
        grpc = ["--grpc-port", str(self.grpc_port)] if self.grpc_port else []
        return [
            sys.executable,
            str(AGENTS_DIR / "a2a_agent.py"),
            "--port",
            str(self.port),
            "--llm",
            fake_llm_base(),
            *grpc,
            *self.extra,
        ]

    def received(self) -> list[dict]:
        """What the agent's executor was given since this process started."""
        return httpx.get(f"{self.url}/_received", timeout=10).json()


class AdkAgent(AgentProcess):
    """`adk api_server --session_service_uri memory://` serving tests/agents (app adk_agent)."""

    name = "adk-agent"

    def command(self) -> list[str]:
        adk = Path(sys.executable).with_name("adk")
        return [
            str(adk),
            "api_server",
            "--session_service_uri",
            "memory://",
            "--artifact_service_uri",
            "memory://",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            str(AGENTS_DIR),
        ]

    def environment(self) -> dict:
        return {**os.environ, "FAKE_LLM_URL": fake_llm_base() + "/v1"}

    def wait_ready(self, deadline: float) -> None:
        self.wait_answering("/list-apps", deadline)


class StackAgent(AgentProcess):
    """An A2A agent of one of the stacks in their own venvs (TETHER_STACK_PYTHON names its
    python; tests/interop/venvs.sh makes it), started as its stack serves it:

      kagent-adk        `kagent-adk run kagent_adk_agent --local` (tests/agents/kagent)
      kagent-langgraph  tests/agents/kagent/kagent_langgraph_agent.py (kagent-langgraph's app)
      adk-a2a           tests/agents/adk_a2a_agent.py (ADK's to_a2a())

    Each keeps everything in memory; ready once its agent card answers."""

    def __init__(self, stack: str, port: int):
        self.name = stack
        super().__init__(port)
        self.stack = stack

    def python(self) -> str:
        return env("TETHER_STACK_PYTHON") or sys.executable

    def command(self) -> list[str]:
        python, port = self.python(), str(self.port)
        if self.stack == "kagent-adk":
            cli = str(Path(python).with_name("kagent-adk"))
            return [cli, "run", "kagent_adk_agent", "--local", "--working-dir", str(AGENTS_DIR / "kagent"),
                    "--host", "127.0.0.1", "--port", port]
        if self.stack == "kagent-langgraph":
            return [python, str(AGENTS_DIR / "kagent" / "kagent_langgraph_agent.py"), "--port", port]
        if self.stack.startswith("adk-a2a"):
            return [python, str(AGENTS_DIR / "adk_a2a_agent.py"), "--port", port]
        raise ValueError(f"unknown stack {self.stack!r}")

    def environment(self) -> dict:
        # kagent's runtimes read these at import; in local mode nothing calls KAGENT_URL.
        return {
            **os.environ,
            "FAKE_LLM_URL": fake_llm_base() + "/v1",
            "KAGENT_URL": "http://127.0.0.1:9",
            "KAGENT_NAME": self.stack,
            "KAGENT_NAMESPACE": "kagent",
            "OTEL_SDK_DISABLED": "true",
            "LOG_LEVEL": "warning",
        }

    def wait_ready(self, deadline: float) -> None:
        self.wait_answering("/.well-known/agent-card.json", deadline)


class LangGraphServer(AgentProcess):
    """`langgraph dev` (LangGraph's API server, in memory) serving tests/agents/langgraph_agent
    as the graph `agent`, from the venv TETHER_STACK_PYTHON names. It flushes threads to
    .langgraph_api/ in its working directory every 10 s, so each start gets a fresh
    directory holding only the graph's code: a restarted container, which has forgotten
    every thread."""

    name = "langgraph-dev"

    def command(self) -> list[str]:
        cli = Path(env("TETHER_STACK_PYTHON") or sys.executable).with_name("langgraph")
        return [str(cli), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(self.port)]

    work: Path | None = None

    def workdir(self) -> Path:
        self.work = Path(tempfile.mkdtemp(prefix="tether-langgraph-"))
        for name in ("graph.py", "langgraph.json"):
            shutil.copy(AGENTS_DIR / "langgraph_agent" / name, self.work / name)
        return self.work

    def kill(self) -> None:
        super().kill()
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)
            self.work = None

    def environment(self) -> dict:
        return {
            **os.environ,
            "FAKE_LLM_URL": fake_llm_base() + "/v1",
            "LANGSMITH_TRACING": "false",
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        }

    def wait_ready(self, deadline: float) -> None:
        self.wait_answering("/ok", deadline)


def fixtures(make):
    """pytest fixtures for a test module's agent: `agent_process`, one process for the module
    (`make()` builds it; these take seconds to start, tests restart it), and `agent`, which
    makes sure it runs and shows its log of the test when the test fails. Use as
    `agent_process, agent = agents.fixtures(lambda: …)`."""
    import pytest

    @pytest.fixture(scope="module")
    def agent_process():
        process = make()
        yield process
        process.kill()
        process.log_path.unlink(missing_ok=True)

    @pytest.fixture
    def agent(agent_process):
        since = agent_process.log_size()
        yield agent_process.ensure_running()
        # Shown by pytest only when the test failed.
        print(f"--- {agent_process.name} log during this test ---\n{agent_process.log_tail(since=since)}")

    return agent_process, agent


def wait_for(ready, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _kill_all(*_args) -> None:
    for agent in list(_live):
        agent.kill()


atexit.register(_kill_all)


def _on_term(signum, _frame) -> None:
    _kill_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


for _sig in (signal.SIGTERM, signal.SIGHUP):
    try:
        signal.signal(_sig, _on_term)
    except (ValueError, OSError):  # not the main thread: atexit still covers normal exits
        pass


# ---- Tether's side ----------------------------------------------------------------------


def tether_url() -> str:
    return env("TETHER_URL").rstrip("/")


def auth_headers(key: str | None = None) -> dict:
    key = key if key is not None else env("TETHER_API_KEY")
    return {"authorization": f"Bearer {key}"} if key else {}


def control(action: str, body: dict, key: str | None = None, base: str | None = None) -> httpx.Response:
    """A control action at Tether (`base`: another gateway than TETHER_URL)."""
    return httpx.post(
        f"{base or tether_url()}/agentengine/api/v1/{action}",
        json=body,
        headers=auth_headers(key),
        timeout=30,
    )


def control_ok(action: str, body: dict, key: str | None = None) -> dict:
    """The `Data` of a control action that must succeed."""
    r = control(action, body, key)
    assert r.status_code == 200 and r.json()["Code"] == 0, f"{action}: {r.status_code} {r.text}"
    return r.json()["Data"]


def session_events(session_id: str, key: str | None = None, base: str | None = None) -> list[dict]:
    """Every event of one session's history in Tether's log (ListSessionEvents, paged by
    position): a fork's inherited events (`Inherited`) first, then its own."""
    events: list[dict] = []
    while True:
        r = control(
            "ListSessionEvents",
            {"SessionId": session_id, "Offset": events[-1]["Position"] if events else 0, "Limit": 500},
            key,
            base,
        )
        assert r.status_code == 200, f"ListSessionEvents {session_id}: {r.status_code} {r.text}"
        page = r.json()["Data"]["Events"]
        events += page
        if len(page) < 500:
            return events


def describe(events: list[dict]) -> str:
    """A compact listing of log events for assertion messages."""
    lines = []
    for e in events:
        content = str(e.get("Content"))
        lines.append(
            f"  {e.get('SeqId')} {e.get('EventType')} role={e.get('Role')} "
            f"run={e.get('RunId')} inv={e.get('InvocationId')} {content[:160]}"
        )
    return "\n".join(lines)


def terminal_statuses(events: list[dict], invocation_id: str | None = None) -> list[str]:
    terminal = {"completed", "failed", "cancelled", "interrupted"}
    return [
        e["Content"]["status"]
        for e in events
        if e["EventType"] == "run_status"
        and isinstance(e.get("Content"), dict)
        and e["Content"].get("status") in terminal
        and (invocation_id is None or e.get("InvocationId") == invocation_id)
    ]


def wait_terminal(
    session_id: str, invocation_id: str | None, key: str | None = None, timeout: float = 30, base: str | None = None
) -> list[dict]:
    """The session's log once the invocation (or every run) has a terminal run_status."""
    deadline = time.monotonic() + timeout
    while True:
        events = session_events(session_id, key, base)
        if terminal_statuses(events, invocation_id):
            return events
        if time.monotonic() > deadline:
            raise AssertionError(f"no terminal run_status for {invocation_id} in:\n{describe(events)}")
        time.sleep(0.1)


def completed_answer(events: list) -> tuple[str | None, str | None]:
    """(the text of the completed status, the contextId) in a2a-sdk StreamResponses."""
    from a2a.types.a2a_pb2 import TaskState

    context, answer = None, None
    for event in events:
        if event.HasField("task"):
            context, status = event.task.context_id, event.task.status
        elif event.HasField("status_update"):
            context, status = event.status_update.context_id, event.status_update.status
        else:
            continue
        if status.state == TaskState.TASK_STATE_COMPLETED:
            answer = "".join(p.text for p in status.message.parts)
    return answer, context


def llm_requests() -> list[dict]:
    """Every request the fake LLM received (its /_requests record)."""
    return httpx.get(f"{fake_llm_base()}/_requests", timeout=10).json()


# ---- raw SSE ----------------------------------------------------------------------------


class SseEvent(dict):
    """One server-sent event: `id`, `event` (None when absent) and `data` (lines joined)."""

    @property
    def json(self):
        import json

        return json.loads(self["data"])


def sse_events(source: "httpx.Response | str"):
    """The events of a streamed httpx response as they arrive, or of a whole SSE body
    (comments skipped)."""
    lines = source.splitlines() if isinstance(source, str) else source.iter_lines()
    event: dict = {"id": None, "event": None, "data": None}
    for line in lines:
        if line == "":
            if event["data"] is not None:
                yield SseEvent(event)
            event = {"id": None, "event": None, "data": None}
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            event["data"] = value if event["data"] is None else event["data"] + "\n" + value
        elif field in ("id", "event"):
            event[field] = value
    if event["data"] is not None:
        yield SseEvent(event)
