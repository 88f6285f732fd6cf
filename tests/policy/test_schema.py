"""`dra-webhook schema`: the committed JSON Schema is the command's output and accepts the shipped policies."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.helpers import ROOT
from webhook.policy.yaml_lines import Yaml12Loader as _Loader

SCHEMA_FILE = ROOT / "policies" / "migrationpolicy.schema.json"
POLICY_DIR = ROOT / "policies"
# The policies directory and the copies the deploy/ manifests ship in their ConfigMaps.
SHIPPED = sorted(POLICY_DIR.glob("*.yaml")) + sorted((ROOT / "deploy").glob("**/policy/*.yaml"))


def _command_output(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "webhook", "schema", *args], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


def _yaml(path: Path) -> Any:
    # The loader's YAML 1.2 reading (dates stay strings, only true/false are booleans), as editors read it.
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_FILE.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_committed_schema_is_the_command_output() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == _command_output(), (
        "policies/migrationpolicy.schema.json is stale: run "
        "`dra-webhook schema > policies/migrationpolicy.schema.json`"
    )


def test_schema_output_file_option(tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    _command_output("-o", str(out))
    assert out.read_text(encoding="utf-8") == SCHEMA_FILE.read_text(encoding="utf-8")


def test_every_key_has_a_description() -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    missing = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, prop in (node.get("properties") or {}).items():
                if not (isinstance(prop, dict) and prop.get("description")):
                    missing.append(f"{where}.{key}")
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    walk(schema, "#")
    assert missing == []
    # The YAML keys, not the Python names: `from`, never `from_`.
    assert "from" in schema["$defs"]["ScheduleEntry"]["properties"]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_policy_validates_against_the_schema(path: Path) -> None:
    _validator().validate(_yaml(path))


@pytest.mark.parametrize("path", sorted(POLICY_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_policy_files_point_editors_at_the_schema(path: Path) -> None:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    match = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)", first)
    assert match, f"{path.name} must start with a yaml-language-server schema comment"
    assert (path.parent / match.group(1)).resolve() == SCHEMA_FILE.resolve()


def test_schema_rejects_what_the_loader_rejects() -> None:
    """The schema is strict like the model: a misspelt key, a wrong stage or action, a bad date."""
    validator = _validator()
    good = _yaml(ROOT / "policies" / "default.yaml")

    def broken(change: Any) -> dict[str, Any]:
        doc = copy.deepcopy(good)
        change(doc)
        return doc

    cases = [
        broken(lambda d: d["spec"].update(cohortz=[])),
        broken(lambda d: d["spec"]["cohorts"][0]["schedule"][0].update(stage="migrate")),
        broken(lambda d: d["spec"]["enforcement"].update(pilot="Block")),
        broken(lambda d: d["spec"]["exceptions"][0].update(expires="2027-13-01")),
        broken(lambda d: d["spec"]["resources"][0].update(maxPerPod=0)),
        broken(lambda d: d["spec"].update(kubernetesVersion=1.37)),
        broken(lambda d: d.pop("metadata")),
    ]
    for doc in cases:
        assert list(validator.iter_errors(doc)), doc
