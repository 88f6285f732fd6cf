"""`make chart` (part of `make release`): the packaged chart holds no symbolic links, carries pyproject.toml's
version as version, appVersion and default image tag, and `helm lint --strict` is clean on the .tgz."""

from __future__ import annotations

import subprocess
import tarfile
import tomllib
from pathlib import Path

import yaml

from tests import helm_cli
from tests.helpers import ROOT

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_make_chart_packages_a_dereferenced_chart_with_the_one_version(tmp_path: Path) -> None:
    helm = helm_cli.require()
    dist, stage = tmp_path / "dist", tmp_path / "stage"
    proc = subprocess.run(["make", "--no-print-directory", "chart", f"DIST={dist}", f"STAGE={stage}",
                           f"HELM={helm}"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=helm_cli.env(tmp_path / "home"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "found symbolic link" not in proc.stdout + proc.stderr
    package = dist / f"dra-migration-webhook-{VERSION}.tgz"
    with tarfile.open(package) as archive:
        members = archive.getmembers()
        assert not [m.name for m in members if m.issym() or m.islnk()], "no links in the package"
        names = {m.name for m in members}
        chart = yaml.safe_load(archive.extractfile("dra-migration-webhook/Chart.yaml").read())  # type: ignore[union-attr]
        values = yaml.safe_load(archive.extractfile("dra-migration-webhook/values.yaml").read())  # type: ignore[union-attr]
    # The files deploy/chart/files/* link to are in the package as files.
    assert "dra-migration-webhook/files/base/deployment.yaml" in names
    assert "dra-migration-webhook/files/monitoring/dashboard.json" in names
    assert (chart["version"], chart["appVersion"], values["image"]["tag"]) == (VERSION, VERSION, VERSION)
    repository = "registry.example.com/dra-migration-webhook"
    rendered = helm_cli.run(helm, tmp_path / "home", "template", "dra-webhook", str(package), "--namespace",
                            "dra-webhook", "--set", f"image.repository={repository}").stdout
    images = {c["image"] for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {f"{repository}:{VERSION}"}
