"""The chart rendered by the real helm (helm template), and the chart-against-overlay comparison."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from tests import helm_cli

RELEASE, NAMESPACE = "dra-webhook", "dra-webhook"
HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
GENERATED = re.compile(r"^(dra-webhook-policy)-[0-9a-z]{10}$")


def template(helm: Path, home: Path, *args: str, namespace: str = NAMESPACE, hooks: bool = False,
             chart: Path = helm_cli.CHART) -> list[dict[str, Any]]:
    """The release's objects; with ``hooks`` only its hooks (policy check, helm test), which no overlay has."""
    proc = helm_cli.run(helm, home, "template", RELEASE, str(chart), "-n", namespace, *args)
    docs = [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
    return [d for d in docs if ("helm.sh/hook" in (d["metadata"].get("annotations") or {})) == hooks]


def values_file(tmp_path: Path, values: dict[str, Any]) -> str:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def _unhash(name: str) -> str:
    return GENERATED.sub(r"\1", name)


def normalized(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Objects by (kind, name) without what only one tool adds: Helm's labels, kustomize's managed-by, the
    content hash of the generated policy ConfigMap (both tools hash, differently)."""
    out = {}
    for obj in objs:
        labels = obj["metadata"].get("labels", {})
        for key in HELM_ONLY_LABELS:
            labels.pop(key, None)
        if obj["kind"] == "Deployment":
            for label in HELM_ONLY_LABELS:
                obj["spec"]["template"]["metadata"]["labels"].pop(label, None)
            for vol in obj["spec"]["template"]["spec"]["volumes"]:
                if "configMap" in vol:
                    vol["configMap"]["name"] = _unhash(vol["configMap"]["name"])
        for hook in obj.get("webhooks", []):
            for cond in hook.get("matchConditions", []):
                # kustomize re-folds the `>-` scalars with blank lines Helm's YAML reader does not add; CEL
                # ignores whitespace between tokens (and no literal in these expressions holds a newline).
                cond["expression"] = re.sub(r"\s+", " ", cond["expression"])
        obj["metadata"]["name"] = _unhash(obj["metadata"]["name"])
        out[(obj["kind"], obj["metadata"]["name"])] = obj
    return out


def assert_same(chart: list[dict[str, Any]], overlay: list[dict[str, Any]]) -> None:
    ours, theirs = normalized(chart), normalized(overlay)
    assert sorted(ours) == sorted(theirs)
    assert not [k for k in ours if k[0] == "Namespace"], "Helm must not own its release namespace"
    for key, obj in theirs.items():
        assert ours[key] == obj, f"{key}: the chart renders it differently from the overlay"


def with_lint_patches(objs: list[dict[str, Any]], policy: Path) -> list[dict[str, Any]]:
    """``objs`` with the kustomize patches ``dra-webhook lint --webhook-rules POLICY`` prints applied."""
    proc = subprocess.run([sys.executable, "-m", "webhook", "lint", "--webhook-rules", str(policy)],
                          capture_output=True, text=True, check=True)
    patches = yaml.safe_load(proc.stdout)["patches"]
    out = []
    for obj in objs:
        for p in patches:
            if (obj["kind"], obj["metadata"]["name"]) == (p["target"]["kind"], p["target"]["name"]):
                obj = jsonpatch.apply_patch(obj, yaml.safe_load(p["patch"]))
        out.append(obj)
    return out


def container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod_spec["containers"]
    return container


def run_as_written(pod_spec: dict[str, Any], files: dict[str, dict[str, str]], root: Path,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The container's command on this host: ``dra-webhook`` and ``python3`` are this venv's, each volume's files
    (``files``: volume name -> file name -> text) written under ``root`` at its mount path, and every mount path in
    the command and the environment moved under ``root``."""
    spec = container(pod_spec)
    moved: dict[str, str] = {}
    for mount in spec.get("volumeMounts", []):
        target = root / mount["mountPath"].lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        for name, text in files.get(mount["name"], {}).items():
            (target / name).write_text(text)
        moved[mount["mountPath"]] = str(target)

    def local(arg: str) -> str:
        for path, there in moved.items():
            arg = arg.replace(path, there)
        return arg

    command = [local(a) for a in spec["command"]]
    exe = {"dra-webhook": [sys.executable, "-m", "webhook"], "python3": [sys.executable]}[command[0]]
    environ = {**os.environ, **{e["name"]: local(e["value"]) for e in spec.get("env", [])}, **(env or {})}
    return subprocess.run([*exe, *command[1:]], capture_output=True, text=True, timeout=120, env=environ, cwd=root)
