"""`dra-webhook compile` (issue #28 item 1): the shape of its output, its coverage list, and its CEL pieces.

What the compiled policies decide is proven on the real API server (tests/e2e/test_compiled_policies.py); here:
every policy the project ships or tests with compiles to objects the Kubernetes 1.37 schema accepts, each policy
with its binding and every variable declared before use; every rule id is either compiled or listed with why;
the namespace globs and the cohort/stage expression mean what ``CompiledPolicy`` means (evaluated with the
``cel`` package).
"""

from __future__ import annotations

import copy
import datetime as dt
import fnmatch
import json
import re
from pathlib import Path

import cel
import kubernetes_validate
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import K8S_VERSION, ROOT
from webhook.cli import main
from webhook.commands import load_policy
from webhook.compile import compile_admission
from webhook.compile.cel import glob_regex
from webhook.compile.coverage import COMPILED, NOT_COMPILED, not_compiled
from webhook.compile.shared import cohort_expression, stage_expression, valid_until
from webhook.policy import rule_ids as ids

POLICIES = [ROOT / "policies" / "default.yaml", ROOT / "tests" / "e2e" / "data" / "policy.yaml",
            ROOT / "tests" / "e2e" / "data" / "compile-policy.yaml", ROOT / "tests" / "data" / "live-policy.yaml"]
DATES = [dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2027, 2, 15, tzinfo=dt.UTC),
         dt.datetime(2030, 7, 1, tzinfo=dt.UTC)]


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
@pytest.mark.parametrize("at", DATES, ids=lambda d: d.date().isoformat())
def test_compiled_objects_have_the_api_shape(path: Path, at: dt.datetime):
    objects = compile_admission(load_policy(path), at).objects
    assert objects, "every test policy has a legacy name or a maxPerPod: something compiles"
    for kind in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"):
        policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}
        bindings = [o for o in objects if o["kind"] == f"{kind}Binding"]
        assert sorted(b["spec"]["policyName"] for b in bindings) == sorted(policies)
        for p in policies.values():
            _variables_declared_before_use(p)
    kinds = {o["kind"] for o in objects}
    assert kinds == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy",
                     "MutatingAdmissionPolicyBinding"}
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", obj["metadata"]["name"])
        if obj["kind"] == "ValidatingAdmissionPolicyBinding":
            action = obj["spec"]["validationActions"]
            assert action in (["Deny"], ["Warn"], ["Audit"])
            assert obj["spec"]["policyName"].endswith(f"-{action[0].lower()}.dra-migration.io")


def _variables_declared_before_use(policy: dict) -> None:
    declared: list[str] = []
    for v in policy["spec"]["variables"]:
        used = set(re.findall(r"variables\.(\w+)", v["expression"]))
        assert used <= set(declared), (v["name"], used - set(declared))
        declared.append(v["name"])
    texts = [c["expression"] + c["messageExpression"] for c in policy["spec"].get("validations", [])]
    texts += [json.dumps(m) for m in policy["spec"].get("mutations", [])]
    for text in texts:
        used = set(re.findall(r"variables\.(\w+)", text))
        assert used <= set(declared), used - set(declared)


def test_every_rule_is_compiled_or_listed_with_why():
    assert set(COMPILED).isdisjoint(NOT_COMPILED)
    assert set(COMPILED) | set(NOT_COMPILED) == set(ids.RULE_IDS)
    assert [r["rule"] for r in not_compiled()] == [r for r in ids.RULE_IDS if r in NOT_COMPILED]
    assert all(r["why"] for r in not_compiled())


def test_the_cli_prints_objects_and_lists_what_is_left_to_the_webhook(capsys):
    policy = str(ROOT / "tests" / "e2e" / "data" / "compile-policy.yaml")
    assert main(["compile", "--policy", policy, "--at", "2030-03-01", "-o", "json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["kind"] == "List" and doc["validUntil"] == "2030-06-01"
    assert [r["rule"] for r in doc["notCompiled"]] == [r["rule"] for r in not_compiled()]
    for rule, why in NOT_COMPILED.items():
        assert f"not compiled: {rule}: {why}" in err
    assert "valid until 2030-06-01" in err
    assert "claims: compiled for claims whose every request names one of gpu-retired.example.com, gpu.example.com" \
        in err
    assert main(["compile", "--policy", policy, "--at", "2030-03-01"]) == 0
    assert list(yaml.safe_load_all(capsys.readouterr().out)) == doc["items"]


def test_a_bad_date_is_an_input_error(capsys):
    assert main(["compile", "--at", "March"]) == 2
    assert "--at" in capsys.readouterr().err


def test_valid_until_is_the_next_schedule_date_or_the_day_after_an_exception_expires():
    policy = load_policy(ROOT / "tests" / "e2e" / "data" / "compile-policy.yaml")
    assert valid_until(policy, dt.date(2029, 12, 31)) == dt.date(2030, 1, 1)
    assert valid_until(policy, dt.date(2030, 6, 1)) == dt.date(2030, 7, 1)  # exception expires 2030-06-30
    assert valid_until(policy, dt.date(2030, 7, 1)) is None


@given(st.text(alphabet="ab-*?[]!^\\", min_size=1, max_size=7), st.text(alphabet="ab-[]!^\\", max_size=5))
def test_glob_regex_matches_what_fnmatch_matches(pattern: str, name: str):
    assert (re.search(glob_regex([pattern]), name) is not None) == fnmatch.fnmatchcase(name, pattern)


NAMESPACES = [("ml-a", {}), ("xml-a", {}), ("other", {"gpu-migration": "pilot"}),
              ("r", {"division": "research", "cost-center": "1"}),
              ("r2", {"division": "research", "cost-center": "1", "gpu-migration": "hold"}),
              ("r3", {"division": "research"}), ("inference-x", {}), ("serving-y", {"division": "research"}),
              ("team-a", {}), ("batch-b", {}), ("batch-c", {}), ("plain", {"gpu-migration": "migrated"}),
              ("held", {"gpu-migration": "migrated", "hold": ""}), ("lab", {"division": "ml"})]


@pytest.mark.parametrize("path", POLICIES[:3], ids=lambda p: p.name)
@pytest.mark.parametrize("at", DATES, ids=lambda d: d.date().isoformat())
def test_the_stage_expression_is_cohort_for_and_stage_for(path: Path, at: dt.datetime):
    policy = load_policy(path)
    stage, cohort = cel.compile(stage_expression(policy, at.date())), cel.compile(cohort_expression(policy))
    for ns, labels in NAMESPACES:
        ctx = cel.Context()
        ctx.add_variable("variables", {"ns": ns, "labels": labels})
        found = policy.cohort_for(ns, labels)
        assert stage.execute(ctx) == policy.stage_for(found, at), (ns, labels)
        assert cohort.execute(ctx) == (found.name if found else "none"), (ns, labels)


def test_the_readme_rule_table_is_the_coverage_list():
    from webhook.compile.coverage import markdown

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = text.index("<!-- compile:start -->"), text.index("<!-- compile:end -->")
    assert markdown() in text[start:end]


def test_track_rollout_writes_only_where_the_policy_lets_it():
    """No track-rollout patches when it is overridden to Audit (report, don't patch: ``engine``)."""
    from webhook.compile.layouts import POD
    from webhook.compile.mutating import tracking_part

    policy = load_policy(ROOT / "tests" / "e2e" / "data" / "compile-policy.yaml")
    assert tracking_part(POD, policy, dt.date(2030, 3, 1)) is not None
    assert tracking_part(POD, policy.without_rule(ids.TRACK_ROLLOUT), dt.date(2030, 3, 1)) is None


def test_a_policy_declares_only_the_variables_it_reads():
    """``used_variables``: what the expressions read, directly or through another variable, in declared order."""
    from webhook.compile.shared import used_variables

    declared = [{"name": n, "expression": e} for n, e in
                (("a", "1"), ("b", "variables.a + 1"), ("c", "2"), ("d", "variables.b * 2"), ("e", "variables.c"))]
    assert [v["name"] for v in used_variables(declared, ["variables.d > 0"])] == ["a", "b", "d"]
    assert used_variables(declared, ["object.x"]) == []
    objects = compile_admission(load_policy(ROOT / "policies" / "default.yaml"),
                                dt.datetime(2030, 3, 1, tzinfo=dt.UTC)).objects
    for obj in objects:
        spec = obj["spec"]
        if "variables" in spec:
            read = [json.dumps(spec.get("validations", [])), json.dumps(spec.get("mutations", []))]
            assert used_variables(spec["variables"], read) == spec["variables"], obj["metadata"]["name"]


def test_validate_without_a_cluster_is_a_clear_error(capsys, tmp_path):
    assert main(["compile", "--validate", "--kubeconfig", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err
    assert f"error: kubeconfig {tmp_path / 'missing'} does not exist" in err
    assert "Traceback" not in err


def test_bindings_take_the_namespaces_of_the_webhook_configuration(capsys, tmp_path):
    """``--webhook-config``: an overlay that also leaves out ``batch`` namespaces; the shipped one by default."""
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "base" / "webhooks.yaml").read_text(encoding="utf-8")))
    tier = {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["batch"]}]}
    for doc in docs:
        for hook in doc["webhooks"]:
            hook["namespaceSelector"] = copy.deepcopy(tier)  # one object per hook: a shared one dumps as an alias
    path = tmp_path / "hooks.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    policy = str(ROOT / "tests" / "e2e" / "data" / "compile-policy.yaml")
    for args, wanted in (([], "kubernetes.io/metadata.name"), (["--webhook-config", str(path)], "tier")):
        assert main(["compile", "--policy", policy, "--at", "2030-03-01", "-o", "json", *args]) == 0
        items = json.loads(capsys.readouterr().out)["items"]
        selectors = [o["spec"]["matchResources"]["namespaceSelector"] for o in items if o["kind"].endswith("Binding")]
        assert selectors and all(s["matchExpressions"][0]["key"] == wanted for s in selectors)
    docs[0]["webhooks"][0]["name"] = "renamed"
    path.write_text(yaml.safe_dump_all(docs))
    assert main(["compile", "--policy", policy, "--webhook-config", str(path)]) == 2
    assert "no webhook named workloads.mutate.dra-migration.io" in capsys.readouterr().err


def _claim_policies(policy_text: str, tmp_path: Path, at: str = "2030-03-01") -> dict[str, dict]:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text)
    objects = compile_admission(load_policy(path), dt.datetime.fromisoformat(at).replace(tzinfo=dt.UTC)).objects
    return {o["metadata"]["name"]: o for o in objects
            if o["kind"] == "ValidatingAdmissionPolicy" and "-claim" in o["metadata"]["name"]}


COMPILE_POLICY = (ROOT / "tests" / "e2e" / "data" / "compile-policy.yaml").read_text(encoding="utf-8")


def test_claims_are_compiled_where_their_classes_are_named_and_left_to_the_webhook_otherwise(tmp_path):
    """The scope-decidable matchCondition names spec.migration.deviceClasses; claims and templates each have their
    own policies (the ClaimSpec is at spec.devices and spec.spec.devices); one validation per Warn finding up to
    FINDINGS_PER_CLAIM, one for Deny and one for Audit."""
    from webhook.compile.claims import FINDINGS_PER_CLAIM

    found = _claim_policies(COMPILE_POLICY, tmp_path)
    assert sorted(found) == sorted(f"compile-e2e-{layout}-{action}.dra-migration.io" for layout in
                                   ("claims", "claimtemplates") for action in ("deny", "warn", "audit"))
    for name, vap in found.items():
        spec = vap["spec"]
        assert spec["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
        conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
        devices = "object.spec.spec.devices" if "-claimtemplates-" in name else "object.spec.devices"
        assert conditions["scope-decidable"].startswith(devices)
        assert "['gpu-retired.example.com', 'gpu.example.com']" in conditions["scope-decidable"]
        assert "system:kube-scheduler" in conditions["not-scheduler-claim"]
        wanted = FINDINGS_PER_CLAIM if name.endswith("-warn.dra-migration.io") else 1
        assert len(spec["validations"]) == wanted
        # every claim rule of the policy is in the one list of findings, in rule order
        findings = next(v["expression"] for v in spec["variables"] if v["name"] == "claimFindings")
        rules = [ids.DEVICE_CLASS_NOT_ALLOWED, ids.DEVICE_COUNT_EXCEEDS, ids.ALLOCATION_MODE_ALL,
                 ids.ADMIN_ACCESS_NAMESPACE, ids.TOLERATION_TOO_BROAD]
        positions = [findings.index(f"'{rule} ('") for rule in rules]
        assert positions == sorted(positions)


def test_claims_go_to_the_webhook_when_the_scope_names_only_drivers(tmp_path, capsys):
    drivers_only = COMPILE_POLICY.replace(
        "    deviceClasses: [gpu.example.com, gpu-retired.example.com]",
        "    deviceClasses: []\n    drivers: [gpu.example.com]")
    assert drivers_only != COMPILE_POLICY
    assert _claim_policies(drivers_only, tmp_path) == {}
    path = tmp_path / "policy.yaml"
    assert main(["compile", "--policy", str(path), "--at", "2030-03-01"]) == 0
    assert "claims: none compiled (spec.migration names drivers" in capsys.readouterr().err


def test_a_policy_that_maps_no_class_judges_every_claim(tmp_path):
    """MigrationScope.everything: no class tells claims apart, so every claim is the migration's: no
    scope-decidable condition."""
    scope = "  migration:\n    deviceClasses: [gpu.example.com, gpu-retired.example.com]\n"
    everything = COMPILE_POLICY.replace(scope, "")
    start = everything.index("  resources:\n")
    everything = everything[:start] + everything[everything.index("  cohorts:\n"):]
    path = tmp_path / "policy.yaml"
    path.write_text(everything)
    assert load_policy(path).scope.everything
    found = _claim_policies(everything, tmp_path)
    assert found and all("scope-decidable" not in str(v["spec"]["matchConditions"]) for v in found.values())


@pytest.mark.parametrize("path", POLICIES[:3], ids=lambda p: p.name)
@pytest.mark.parametrize("at", DATES, ids=lambda d: d.date().isoformat())
def test_the_stage_in_use_condition_skips_only_namespaces_whose_name_settles_another_stage(path: Path, at: dt.datetime):
    """``outside_stages`` reads the name alone (a matchCondition has no namespaceObject): it must never skip a
    namespace whose cohort, labels included, is in one of the stages; and it does skip some where it can."""
    from webhook.compile.shared import outside_stages

    policy = load_policy(path)
    skipped_any = False
    for stages in ({"legacy"}, {"pilot"}, {"migrated"}, {"legacy", "pilot"}):
        text = outside_stages(policy, at.date(), frozenset(stages))
        if text is None:
            continue
        expr = cel.compile(text)
        for ns, labels in NAMESPACES:
            ctx = cel.Context()
            ctx.add_variable("request", {"namespace": ns})
            if expr.execute(ctx):
                skipped_any = True
                assert policy.stage_for(policy.cohort_for(ns, labels), at) not in stages, (ns, labels, stages)
    if path.name == "default.yaml":
        assert skipped_any  # ml-* is the first cohort, by name


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
@pytest.mark.parametrize("at", DATES, ids=lambda d: d.date().isoformat())
def test_a_binding_leaves_out_only_namespaces_its_stage_in_use_condition_skips(path: Path, at: dt.datetime):
    """``skip_settled``: a name is left out of a binding only when its name settles the stage (whatever the
    namespace's labels: ``settled_stage`` is ``stage_for(cohort_for(...))`` for every label set of the table) and
    its policy's ``stage-in-use`` matchCondition, checked above against ``cohort_for``, would skip it anyway."""
    from webhook.compile.shared import Namespaces, named_in_policy, settled_stage

    policy = load_policy(path)
    label_sets = [labels for _, labels in NAMESPACES]
    for ns, _ in NAMESPACES:
        settled = settled_stage(policy, at.date(), ns)
        if settled is not None:
            assert {policy.stage_for(policy.cohort_for(ns, labels), at) for labels in label_sets} == {settled}, ns
    names = frozenset(n for n, _ in NAMESPACES)
    objects = compile_admission(policy, at, Namespaces(existing=names)).objects
    left_out = 0
    for vap, binding in zip(objects, objects[1:], strict=False):
        if vap["kind"] != "ValidatingAdmissionPolicy":
            continue
        exprs = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][1:]
        out = [v for e in exprs for v in e["values"]]
        assert set(out) <= names | named_in_policy(policy)
        condition = next((c["expression"] for c in vap["spec"]["matchConditions"] if c["name"] == "stage-in-use"),
                         "true")
        for ns in out:
            ctx = cel.Context()
            ctx.add_variable("request", {"namespace": ns})
            assert cel.compile(condition).execute(ctx) is False, (vap["metadata"]["name"], ns)
        left_out += len(out)
    if path.name == "default.yaml" and at > DATES[0]:  # on DATES[0] every namespace is legacy: Audit only
        assert left_out  # ml-a, by the first cohort's name


def test_a_binding_leaves_out_at_most_max_skipped_names():
    """Thousands of namespaces settled elsewhere: the list stops at ``MAX_SKIPPED`` (the rest is left to the
    ``stage-in-use`` matchCondition), so a binding stays a small object."""
    from webhook.compile.shared import MAX_SKIPPED, Namespaces

    policy = load_policy(POLICIES[0])
    many = frozenset(f"ml-{i:05d}" for i in range(MAX_SKIPPED + 10))
    objects = compile_admission(policy, DATES[1], Namespaces(existing=many)).objects
    audit = next(o for o in objects if o["metadata"]["name"].endswith("-pods-audit.dra-migration.io")
                 and o["kind"] == "ValidatingAdmissionPolicyBinding")
    out = audit["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][-1]["values"]
    assert len(out) == MAX_SKIPPED and out == sorted(many)[:MAX_SKIPPED]


def test_only_valid_namespace_names_of_the_policy_are_left_out_by_name(tmp_path):
    """A cohort's exact names are left out of the bindings without a cluster, but only those a Namespace can have:
    the API server refuses a selector value that is not a label value (brace text, 64 characters)."""
    from webhook.compile.shared import named_in_policy

    text = (ROOT / "policies" / "default.yaml").read_text()
    first = text.index("  - name: pilot-teams")
    odd = ("  - name: odd\n    namespaces:\n      names: [\"team-{a,b}\", \"" + "x" * 64 + "\", \"lab-1\"]\n"
           "    schedule: []\n")
    (tmp_path / "p.yaml").write_text(text[:first] + odd + text[first:])
    policy = load_policy(tmp_path / "p.yaml")
    assert named_in_policy(policy) == {"lab-1"}
    values = [v for o in compile_admission(policy, DATES[1]).objects if o["kind"].endswith("PolicyBinding")
              for e in o["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"] for v in e["values"]]
    assert "lab-1" in values and not any("{" in v or len(v) > 63 for v in values)


def test_inline_variables_writes_cheap_and_once_read_variables_into_their_readers():
    """``inline_variables``: a cheap variable goes everywhere it is read, an expensive one read once goes into its
    reader (outside a macro only), one read twice or inside a macro stays; a path into the object goes in as
    ``dyn`` (the type its variable had), and text inside string literals is left alone."""
    from webhook.compile.shared import inline_variables

    declared = [{"name": n, "expression": e} for n, e in (
        ("spec", "object.spec"),
        ("names", "variables.spec.containers.map(c, c.name)"),
        ("twice", "variables.spec.containers.filter(c, c.name == 'a')"),
        ("looped", "['x'].filter(n, n.matches('^x$'))"),
        ("flag", "size(variables.twice) > 0"))]
    variables, out = inline_variables(declared, [
        "variables.names.size() + size(variables.twice) + size(variables.twice)",
        "[1].exists(i, variables.looped.size() > 0) && variables.flag && variables.flag",
        "'variables.names'"])
    assert [v["name"] for v in variables] == ["twice", "looped"]
    assert variables[0]["expression"] == "dyn(object.spec).containers.filter(c, c.name == 'a')"
    assert out == ["(dyn(object.spec).containers.map(c, c.name)).size() + size(variables.twice) + "
                   "size(variables.twice)",
                   "[1].exists(i, variables.looped.size() > 0) && (size(variables.twice) > 0) && "
                   "(size(variables.twice) > 0)",
                   "'variables.names'"]


def test_standalone_binds_what_is_read_again_and_writes_in_the_rest():
    """``standalone`` (a matchCondition cannot read variables): a cheap variable, or one read once outside a macro,
    is written in; one read twice, or inside a macro, is computed once in a one-element comprehension named
    ``b_<name>``, outermost first, so what a bound value reads is bound around it; variables it does not read are
    left out."""
    from webhook.compile.shared import standalone

    declared = [{"name": n, "expression": e} for n, e in (
        ("spec", "object.spec"),
        ("names", "variables.spec.containers.map(c, c.name)"),
        ("twice", "variables.names.filter(n, n == 'a')"),
        ("looped", "['x'].filter(n, n.matches('^x$'))"),
        ("unread", "object.metadata.name.matches('^y')"))]
    out = standalone("size(variables.twice) + size(variables.twice) + [1].filter(i, variables.looped.size() > 0)"
                     ".size()", declared)
    assert "variables." not in out and "unread" not in out and "^y" not in out
    assert out == ("[dyn((dyn(object.spec).containers.map(c, c.name)).filter(n, n == 'a'))].map(b_twice, "
                   "[dyn(['x'].filter(n, n.matches('^x$')))].map(b_looped, size(b_twice) + size(b_twice) + "
                   "[1].filter(i, b_looped.size() > 0).size())[0])[0]")


def test_named_cohort_is_true_only_where_no_label_is_read(tmp_path):
    """``named_cohort``: a matchCondition has no ``namespaceObject``, so the namespace counts as known only where a
    name glob decides it before any cohort with a selector is tried (cohorts in order, the first match wins)."""
    import re as _re

    from webhook.compile.shared import named_cohort

    doc = yaml.safe_load(COMPILE_POLICY)
    cohorts = doc["spec"]["cohorts"]

    def known(names: list[list[str] | None], labelled: list[bool], ns: str) -> bool:
        doc["spec"]["cohorts"] = [
            {**copy.deepcopy(cohorts[0]), "name": f"c{i}", "namespaces": {**({"names": n} if n else {}),
                                                           **({"selector": {"matchLabels": {"a": "b"}}} if s else {})}}
            for i, (n, s) in enumerate(zip(names, labelled, strict=True))]
        path = tmp_path / "named-cohort.yaml"
        path.write_text(yaml.safe_dump(doc))
        expr = named_cohort(load_policy(path))
        # the expression is request.namespace.matches(...) joined by || and literals: evaluate it in Python
        py = _re.sub(r"request\.namespace\.matches\(('(?:\\\\.|[^'])*')\)",
                     lambda m: f"bool(re.search({m.group(1)}, ns))", expr)
        return eval(py.replace("||", " or ").replace("true", "True").replace("false", "False"),  # noqa: S307
                    {"re": _re, "ns": ns})

    assert known([["team-*"], None], [False, True], "team-a")  # named before the labelled cohort
    assert not known([["team-*"], None], [False, True], "other")  # would read the labels
    assert known([["team-*"], ["ml-*"]], [False, False], "other")  # no selector anywhere: the default stage
    assert not known([["team-*"], ["ml-*"]], [True, False], "ml-x")  # team-* has a selector too: tried first
    assert known([["team-*"], ["ml-*"]], [True, False], "team-x")  # its name matches: labels not read
