"""Policy loader: every kind of mistake is reported as file:line: key.path: message, from real files."""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
from pathlib import Path

import pytest
from pydantic import BaseModel

from webhook.commands import lint as lint_command
from webhook.policy.loader import PolicyError, Problem, lint, lint_report, load
from webhook.policy.model import Action

ROOT = Path(__file__).resolve().parents[2]
BASE = (Path(__file__).parents[1] / "data" / "policies" / "base.yaml").read_text()


def line_of(text: str, needle: str) -> int:
    """1-based line of the first occurrence of ``needle``: expected lines follow the fixture, not magic."""
    index = text.index(needle)
    return text.count("\n", 0, index) + 1


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


def broken(old: str, new: str) -> str:
    assert old in BASE, old
    return BASE.replace(old, new, 1)


def problems_of(path: Path) -> list[Problem]:
    with pytest.raises(PolicyError) as info:
        load(path)
    assert lint(path) == info.value.problems
    return info.value.problems


# --------------------------------------------------------------------------------------------- valid


def test_bundled_default_policy_loads_and_sets_every_key() -> None:
    policy = load(ROOT / "policies")
    assert policy.name == "gpu-fleet"
    assert policy.files == (str(ROOT / "policies" / "default.yaml"),)
    assert (ROOT / "policies" / "default.yaml").read_text().splitlines()[0] == (
        "# yaml-language-server: $schema=./migrationpolicy.schema.json"
    )
    # Every field of every model class used in the policy is written out at least once, so the
    # bundled file documents the whole format.
    unset: dict[str, set[str]] = {}
    seen: dict[str, set[str]] = {}

    def visit(value: object) -> None:
        if isinstance(value, BaseModel):
            name = type(value).__name__
            unset.setdefault(name, set(type(value).model_fields))
            seen.setdefault(name, set()).update(value.model_fields_set)
            for field in type(value).model_fields:
                visit(getattr(value, field))
        elif isinstance(value, list | tuple):
            for item in value:
                visit(item)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)

    visit(policy.source)
    missing = {name: fields - seen[name] for name, fields in unset.items() if fields - seen[name]}
    assert missing == {}
    assert [c.name for c in policy.cohorts] == ["pilot-teams", "research", "production-inference"]
    assert policy.legacy["vendor.example.com/gpu"].name == "example.com/gpu"
    assert set(policy.source.spec.featureGates) == {"DRAWorkloadResourceClaims", "GenericWorkload"}
    assert any(e.expires and e.expires.year == 2027 for e in policy.source.spec.exceptions)


def test_file_and_directory_give_the_same_identity_from_the_raw_bytes(tmp_path: Path) -> None:
    path = write(tmp_path / "p", "policy.yaml", BASE)
    by_dir, by_file = load(tmp_path / "p"), load(path)
    assert (
        by_dir.identity == by_file.identity == f"gpu-fleet@{hashlib.sha256(BASE.encode()).hexdigest()[:12]}"
    )
    assert by_dir.files == (str(path),)


def test_identity_changes_with_any_content_change(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", BASE)
    first = load(tmp_path).identity
    path.write_text(BASE + "# a comment changes the bytes, so the identity\n")
    second = load(tmp_path).identity
    path.write_text(BASE.replace("maxPerPod: 8", "maxPerPod: 4"))
    third = load(tmp_path).identity
    assert len({first, second, third}) == 3
    assert all(i.startswith("gpu-fleet@") for i in (first, second, third))


def test_hash_covers_every_file_read_in_name_order(tmp_path: Path) -> None:
    write(tmp_path, "b.yaml", BASE)
    write(tmp_path, "a.yml", "# notes only, no document\n")
    policy = load(tmp_path)
    assert policy.files == (str(tmp_path / "a.yml"), str(tmp_path / "b.yaml"))
    raw = (tmp_path / "a.yml").read_bytes() + (tmp_path / "b.yaml").read_bytes()
    assert policy.sha256 == hashlib.sha256(raw).hexdigest()


def test_dates_may_be_plain_or_quoted_and_off_is_an_action(tmp_path: Path) -> None:
    write(tmp_path, "p.yaml", BASE)
    spec = load(tmp_path).source.spec
    assert [e.from_ for e in spec.cohorts[0].schedule] == [dt.date(2026, 12, 1), dt.date(2027, 2, 1)]
    assert spec.exceptions[0].expires == dt.date(2027, 3, 1)
    # YAML 1.1 would read the unquoted Off as false.
    assert spec.enforcement.legacy is Action.Off


def test_hidden_other_and_nested_files_are_not_read(tmp_path: Path) -> None:
    write(tmp_path, "policy.yaml", BASE)
    write(tmp_path, ".second.yaml", BASE.replace("gpu-fleet", "hidden"))
    write(tmp_path, "README.md", "not yaml")
    write(tmp_path, "policy.yaml.bak", "{broken")
    write(tmp_path / "sub", "second.yaml", BASE.replace("gpu-fleet", "nested"))
    policy = load(tmp_path)
    assert policy.name == "gpu-fleet"
    assert policy.files == (str(tmp_path / "policy.yaml"),)


def test_multi_document_file_skips_empty_documents_and_keeps_lines(tmp_path: Path) -> None:
    text = "---\n# nothing here\n---\n" + BASE + "---\n...\n"
    path = write(tmp_path, "p.yaml", text)
    assert load(tmp_path).name == "gpu-fleet"
    path.write_text(text.replace("maxPerPod: 8", "maxPerPod: 0"))
    [problem] = problems_of(tmp_path)
    assert problem == Problem(
        str(path),
        line_of(text, "maxPerPod"),
        "spec.resources[0].maxPerPod",
        "must be at least 1, got 0 (a number)",
    )


# ------------------------------------------------------------------------------------------ mistakes

MISTAKES = [
    pytest.param(
        "  cohorts:\n",
        "  cohort:\n",
        "  cohort:",
        "spec.cohort: unknown key 'cohort' (did you mean 'cohorts'?)",
        id="unknown-key-with-suggestion",
    ),
    pytest.param(
        "    dra: {nodeSelector:",
        "    dra: {nodeSelectr:",
        "nodeSelectr",
        "spec.nodePools.dra.nodeSelectr: unknown key 'nodeSelectr' (did you mean 'nodeSelector'?)",
        id="unknown-key-nested",
    ),
    pytest.param(
        "{stage: migrated,",
        "{stage: migrate,",
        "stage: migrate,",
        "spec.cohorts[0].schedule[1].stage: 'migrate' is not one of legacy, pilot, migrated",
        id="wrong-enum",
    ),
    pytest.param(
        "    legacy: Off\n",
        "    legacy: Block\n",
        "legacy: Block",
        "spec.enforcement.legacy: 'Block' is not one of Deny, Warn, Audit, Off",
        id="wrong-action",
    ),
    pytest.param(
        "  featureGates:\n",
        "  kubernetesVersion: 1.37\n  featureGates:\n",
        "kubernetesVersion",
        'spec.kubernetesVersion: 1.37 (a number) is not one of 1.36, 1.37, 1.38: quote it ("1.37")',
        id="version-as-number",
    ),
    pytest.param(
        "maxPerPod: 8",
        "maxPerPod: eight",
        "maxPerPod",
        "spec.resources[0].maxPerPod: expected an integer, got 'eight'",
        id="wrong-type-integer",
    ),
    pytest.param(
        'names: ["ml-*"]',
        "names: ml-*",
        "names:",
        "spec.cohorts[0].namespaces.names: expected a list, got 'ml-*'",
        id="wrong-type-list",
    ),
    pytest.param(
        "allocation: dra}",
        "allocation: 1}",
        "allocation: 1",
        "spec.nodePools.dra.nodeSelector['gpu.example.com/allocation']: "
        "expected a string, got 1 (a number): quote it",
        id="wrong-type-label-value",
    ),
    pytest.param(
        "  - name: pilot-teams\n    namespaces:",
        "  - namespaces:",
        "  - namespaces:",
        "spec.cohorts[0].name: required key 'name' is missing",
        id="missing-required-key",
    ),
    pytest.param(
        "  name: gpu-fleet\n",
        "  labels: {}\n",
        "metadata:",
        "metadata.name: required key 'name' is missing",
        id="missing-key-reports-parent-line",
    ),
    pytest.param(
        "from: 2027-02-01",
        "from: 2027-02-30",
        "2027-02-30",
        "spec.cohorts[0].schedule[1].from: '2027-02-30' is not a date (YYYY-MM-DD): "
        "day value is outside expected range",
        id="bad-date",
    ),
    pytest.param(
        "expires: 2027-03-01",
        'expires: "next spring"',
        "expires",
        "spec.exceptions[0].expires: 'next spring' is not a date (YYYY-MM-DD): invalid character in year",
        id="bad-date-quoted",
    ),
    pytest.param(
        "{gated-feature: Deny}",
        "{gated-featur: Deny}",
        "gated-featur",
        "spec.enforcement.rules.gated-featur: unknown rule 'gated-featur' (did you mean 'gated-feature'?)",
        id="unknown-rule-in-enforcement",
    ),
    pytest.param(
        "rules: [legacy-resource-name]",
        "rules: [legacy-resource-nam]",
        "legacy-resource-nam",
        "spec.exceptions[0].rules[0]: "
        "unknown rule 'legacy-resource-nam' (did you mean 'legacy-resource-name'?)",
        id="unknown-rule-in-exception",
    ),
    pytest.param(
        "  nodePools:\n",
        "  - {name: example.com/gpu2, deviceClassName: gpu2.example.com,"
        " legacyNames: [vendor.example.com/gpu]}\n"
        "  nodePools:\n",
        "example.com/gpu2",
        "spec.resources[1].legacyNames[0]: resource name 'vendor.example.com/gpu' is mapped twice",
        id="duplicate-legacy-mapping",
    ),
    pytest.param(
        "GenericWorkload: false",
        "GenericWorkloads: false",
        "GenericWorkloads",
        "spec.featureGates.GenericWorkloads: "
        "unknown feature gate 'GenericWorkloads' (did you mean 'GenericWorkload'?)",
        id="unknown-feature-gate",
    ),
    pytest.param(
        "- name: example.com/gpu\n",
        "- name: gpu\n",
        "- name: gpu",
        "spec.resources[0].name: 'gpu' is not an extended resource name (domain/name, e.g. example.com/gpu)",
        id="bad-extended-resource-name",
    ),
    pytest.param(
        "legacyNames: [vendor.example.com/gpu]",
        "legacyNames: [vendor.example.com/gpu, nvidia]",
        "nvidia",
        "spec.resources[0].legacyNames[1]: 'nvidia' is not an extended resource name (domain/name)",
        id="bad-legacy-name-points-at-item",
    ),
    pytest.param(
        "operator: In, values: [pilot]}",
        "operator: In}",
        "operator: In",
        "spec.cohorts[0].namespaces.selector.matchExpressions[0]: operator In needs at least one value",
        id="selector-in-without-values",
    ),
    pytest.param(
        "  defaultStage: legacy\n",
        "  defaultStage: legacy\n  defaultStage: pilot\n",
        "defaultStage: pilot",
        "spec.defaultStage: duplicate key 'defaultStage' (first at line {first})",
        id="duplicate-key",
    ),
    pytest.param(
        "    dra: {nodeSelector: {gpu.example.com/allocation: dra}}",
        "    dra: {nodeSelector: {gpu.example.com/allocation: dra}, advertises: [gpu]}",
        "advertises",
        "spec.nodePools.dra.advertises[0]: 'gpu' is not an extended resource name (domain/name)",
        id="advertised-name-not-extended",
    ),
    pytest.param(
        "  nodePools:\n",
        "  schedulerUsernames: []\n  nodePools:\n",
        "schedulerUsernames",
        "spec.schedulerUsernames: list should have at least 1 item after validation, not 0",
        id="no-scheduler-username",
    ),
    pytest.param(
        'reason: "INC-1234"',
        'reason: ""',
        "reason",
        "spec.exceptions[0].reason: must not be empty",
        id="empty-reason",
    ),
]


@pytest.mark.parametrize(("old", "new", "needle", "expected"), MISTAKES)
def test_each_mistake_names_file_line_and_key(
    tmp_path: Path, old: str, new: str, needle: str, expected: str
) -> None:
    text = broken(old, new)
    path = write(tmp_path, "policy.yaml", text)
    expected = expected.format(first=line_of(text, "defaultStage"))
    problems = problems_of(tmp_path)
    assert [str(p) for p in problems] == [f"{path}:{line_of(text, needle)}: {expected}"]


def test_all_mistakes_are_reported_at_once_in_line_order(tmp_path: Path) -> None:
    text = broken("{stage: migrated,", "{stage: migrate,").replace("  defaultStage:", "  defaultStag:")
    text = text.replace("maxPerPod: 8", "maxPerPod: eight")
    path = write(tmp_path, "policy.yaml", text)
    with pytest.raises(PolicyError) as info:
        load(tmp_path)
    lines = str(info.value).splitlines()
    assert lines == [
        f"{path}:{line_of(text, 'maxPerPod')}: spec.resources[0].maxPerPod: expected an integer, got 'eight'",
        f"{path}:{line_of(text, 'stage: migrate,')}: spec.cohorts[0].schedule[1].stage: "
        "'migrate' is not one of legacy, pilot, migrated",
        f"{path}:{line_of(text, 'defaultStag:')}: spec.defaultStag: unknown key 'defaultStag' "
        "(did you mean 'defaultStage'?)",
    ]


def test_yaml_syntax_error_has_the_line_of_the_mark(tmp_path: Path) -> None:
    text = broken("  defaultStage: legacy\n", "  defaultStage: legacy: pilot\n")
    path = write(tmp_path, "policy.yaml", text)
    [problem] = problems_of(tmp_path)
    assert (problem.file, problem.line, problem.path) == (str(path), line_of(text, "defaultStage"), "")
    assert str(problem) == f"{path}:{problem.line}: YAML syntax error: mapping values are not allowed here"


def test_unclosed_flow_sequence_names_where_it_started(tmp_path: Path) -> None:
    text = broken('names: ["ml-*"]', 'names: ["ml-*"')
    path = write(tmp_path, "policy.yaml", text)
    [problem] = problems_of(tmp_path)
    assert problem.file == str(path) and problem.line > line_of(text, "names:")
    assert problem.message.startswith("YAML syntax error: ")
    assert f"while parsing a flow sequence at line {line_of(text, 'names:')}" in problem.message


def test_two_policies_in_two_files_name_both_places(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yaml", BASE)
    b = write(tmp_path, "b.yaml", "# second team's copy\n" + BASE.replace("name: gpu-fleet", "name: other"))
    [problem] = problems_of(tmp_path)
    assert str(problem) == (
        f"{b}:3: a second MigrationPolicy 'other'; the first is 'gpu-fleet' at {a}:2 "
        "(a policy directory holds exactly one)"
    )


def test_two_policies_in_one_file(tmp_path: Path) -> None:
    text = BASE + "---\n" + BASE
    path = write(tmp_path, "p.yaml", text)
    [problem] = problems_of(tmp_path)
    second = line_of(text, "---") + 2  # the comment line, then apiVersion
    assert problem.file == str(path) and problem.line == second
    assert f"the first is 'gpu-fleet' at {path}:2" in problem.message


def test_no_policy_names_the_directory(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert [str(p) for p in problems_of(empty)] == [
        f"{empty}: no MigrationPolicy found (no *.yaml or *.yml files)"
    ]
    comments = tmp_path / "comments"
    write(comments, "p.yaml", "# only comments\n---\n")
    assert [str(p) for p in problems_of(comments)] == [
        f"{comments}: no MigrationPolicy found in {comments / 'p.yaml'}"
    ]


def test_missing_path(tmp_path: Path) -> None:
    assert [str(p) for p in problems_of(tmp_path / "nope")] == [
        f"{tmp_path / 'nope'}: no such file or directory"
    ]


def test_a_document_of_another_kind_is_an_error_with_its_line(tmp_path: Path) -> None:
    text = BASE + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
    path = write(tmp_path, "p.yaml", text)
    [problem] = problems_of(tmp_path)
    assert problem.file == str(path) and problem.line == line_of(text, "kind: ConfigMap")
    assert problem.path == "kind"
    assert problem.message.startswith("'ConfigMap' (apiVersion 'v1') is not a MigrationPolicy")


def test_a_document_that_is_not_a_mapping(tmp_path: Path) -> None:
    text = BASE + "---\n- just\n- a list\n"
    path = write(tmp_path, "p.yaml", text)
    [problem] = problems_of(tmp_path)
    assert (
        str(problem)
        == f"{path}:{line_of(text, '- just')}: a document must be a MigrationPolicy mapping, got a list"
    )


def test_wrong_api_version_of_a_policy(tmp_path: Path) -> None:
    text = broken("dra-migration.io/v1alpha1", "dra-migration.io/v1")
    path = write(tmp_path, "p.yaml", text)
    assert [str(p) for p in problems_of(tmp_path)] == [
        f"{path}:2: apiVersion: 'dra-migration.io/v1' is not one of dra-migration.io/v1alpha1"
    ]


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(BASE.encode() + b"# caf\xe9\n")
    [problem] = problems_of(tmp_path)
    assert problem.file == str(path) and "UTF-8" in problem.message


# ---------------------------------------------------------------------------------------------- lint


def test_lint_report_warns_about_expired_exceptions(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", BASE)
    assert lint(tmp_path) == []
    assert lint_report(tmp_path, today=dt.date(2027, 2, 14)).warnings == []
    report = lint_report(tmp_path, today=dt.date(2027, 3, 2))
    assert report.errors == [] and report.policy is not None
    assert [str(w) for w in report.warnings] == [
        f"{path}:{line_of(BASE, 'expires')}: spec.exceptions[0].expires: "
        "exception 'INC-1234' expired on 2027-03-01 and no longer applies"
    ]


def _lint_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    lint_command.add_parser(parser.add_subparsers())
    return parser.parse_args(["lint", *argv])


def test_lint_command_exit_codes_and_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path / "good", "p.yaml", BASE)
    assert lint_command.run(_lint_args([str(tmp_path / "good")])) == 0
    identity = load(good).identity
    assert capsys.readouterr().out.splitlines()[0] == f"policy OK: {identity} ({good})"

    bad = write(tmp_path / "bad", "p.yaml", broken("maxPerPod: 8", "maxPerPod: eight"))
    assert lint_command.run(_lint_args([str(tmp_path / "bad")])) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{bad}:{line_of(BASE, 'maxPerPod')}: spec.resources[0].maxPerPod: expected an integer, got 'eight'",
        "1 error",
    ]

    assert lint_command.run(_lint_args(["--at", "2027-06-01", str(good)])) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{good}:") and ": warning: " in out[0] and out[1].startswith("policy OK: ")


def test_lint_command_default_dir_is_policies() -> None:
    assert _lint_args([]).dir == "policies"
