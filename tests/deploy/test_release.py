"""Release metadata (issue 48 item 1): one version source, a licence, a changelog entry for the version.

``pyproject.toml``'s version is the one source: every other place that states a version (chart, kustomize labels,
image tags, Dockerfile, the CLI) must agree with it, and CHANGELOG.md must have its entry."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import yaml

from tests.builders.deploy import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PROJECT["version"]
SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?")


def test_version_is_semantic() -> None:
    assert SEMVER.fullmatch(VERSION), VERSION


def test_chart_carries_the_version() -> None:
    chart = yaml.safe_load((ROOT / "deploy" / "chart" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)


def test_every_stated_version_in_deploy_and_the_dockerfile_is_the_package_version() -> None:
    """Labels ``app.kubernetes.io/version``, image tags ``dra-migration-webhook:X``, the Dockerfile's label."""
    stated: list[tuple[str, str]] = []
    files = [*sorted((ROOT / "deploy").rglob("*.yaml")), ROOT / "Dockerfile"]
    for path in files:
        text = path.read_text()
        for pattern in (r"app\.kubernetes\.io/version:\s*\"?([^\"\s]+)",
                        r"dra-migration-webhook:(\d[^\s\"'.]*\.\d+\.\d+)",
                        r"org\.opencontainers\.image\.version=\"([^\"]+)\""):
            stated += [(str(path.relative_to(ROOT)), m) for m in re.findall(pattern, text)]
    assert stated, "no version found: the patterns are wrong"
    assert [s for s in stated if s[1] not in (VERSION, "{{")] == []


def test_readme_states_the_version() -> None:
    assert f"Version {VERSION} ([CHANGELOG.md](CHANGELOG.md)), Apache-2.0 ([LICENSE](LICENSE))" in (
        ROOT / "README.md").read_text()


def test_cli_prints_the_version() -> None:
    out = subprocess.run([sys.executable, "-m", "webhook", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"dra-webhook {VERSION}"


def test_changelog_has_an_entry_for_the_version_with_upgrade_notes() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    released = re.findall(r"^## \[(\d[^\]]*)\] - (\d{4}-\d{2}-\d{2})$", text, re.M)
    assert released and released[0][0] == VERSION, released[:1]  # the newest entry is this version
    entry = text.split(f"## [{VERSION}]")[1].split("\n## [")[0]
    assert "### Upgrade notes" in entry
    assert f"[{VERSION}]: " in text  # the link reference


def test_licence_is_apache_2_in_the_file_and_the_metadata() -> None:
    assert "Apache License\n                           Version 2.0, January 2004" in (ROOT / "LICENSE").read_text()
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    from importlib.metadata import metadata

    meta = metadata("dra-migration-webhook")
    assert meta["License-Expression"] == "Apache-2.0"
