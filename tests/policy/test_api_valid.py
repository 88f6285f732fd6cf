"""Issue 13 item 6: whatever a policy makes the webhook write into an object is valid for the API server.

Checked at policy load, with the file's line: a device toleration as kubernetes/kubernetes
``pkg/apis/resource/validation/validation.go`` ``validateDeviceToleration`` (master, 1.37) checks it, node-pool
labels as ``IsQualifiedName``/``IsValidLabelValue`` (``staging/src/k8s.io/apimachinery/pkg/util/validation``),
annotation keys as qualified names and annotation values bounded well under ``ValidateAnnotations``'s 256 KiB
total. That the patches themselves are accepted is shown on the real API server by
tests/e2e/test_corpus_patches.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.objects import names as k8s_names
from webhook.policy.loader import PolicyError, Problem, load

POLICY = """\
apiVersion: dra-migration.io/v1alpha1
kind: MigrationPolicy
metadata:
  name: api-valid
spec:
  annotationPrefix: dra-migration.io
  resources:
  - name: example.com/gpu
    deviceClassName: gpu.example.com
  nodePools:
    dra:
      nodeSelector:
        gpu.example.com/allocation: dra
  cohorts:
  - name: pilot-teams
    namespaces: {names: ["ml-*"]}
  trainingJobs:
    labels: {workload.example.com/kind: training}
    deviceTolerations:
    - key: example.com/maintenance
      operator: Exists
      effect: NoExecute
      tolerationSeconds: 600
    - key: example.com/health
      operator: Equal
      value: degraded
      effect: NoSchedule
"""

LONG = "x" * 64


def _problems(tmp_path: Path, old: str, new: str) -> list[Problem]:
    assert old in POLICY, old
    text = POLICY.replace(old, new, 1)
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        load(path)
    line = text[: text.index(new)].count("\n") + 1
    for p in info.value.problems:
        assert p.file == str(path)
    assert any(p.line == line for p in info.value.problems), (line, info.value.problems)
    return info.value.problems


def test_the_valid_policy_loads(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    policy = load(path)
    assert [t["key"] for t in policy.device_tolerations] == ["example.com/maintenance", "example.com/health"]


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        # Key: a qualified name (prefix a DNS subdomain, name at most 63 characters).
        ("- key: example.com/maintenance", f"- key: example.com/{LONG}", "no more than 63 characters"),
        ("- key: example.com/maintenance", "- key: example..com/maintenance", "prefix part"),
        ("- key: example.com/maintenance", "- key: a/b/c", "one '/'"),
        ("- key: example.com/maintenance", "- key: -maintenance", "start and end with an alphanumeric"),
        ("- key: example.com/maintenance", "- key: Example.com/maintenance", "prefix part"),
        # Value: a label value.
        ("value: degraded", "value: not degraded", "value 'not degraded'"),
        ("value: degraded", f"value: {LONG}", "no more than 63 characters"),
        # tolerationSeconds >= 0 (the eviction controller reads a negative value as "evict at once").
        ("tolerationSeconds: 600", "tolerationSeconds: -1", "at least 0"),
        # Operator and effect enums, Exists without a value.
        ("operator: Exists", "operator: Gt", "is not one of Exists, Equal"),
        ("effect: NoSchedule", "effect: PreferNoSchedule", "is not one of"),
        ("      effect: NoExecute", "      value: x\n      effect: NoExecute", "must be empty for operator Exists"),
        # Node-pool labels go into node affinity: a label key and a label value.
        ("gpu.example.com/allocation: dra", f"gpu.example.com/{LONG}: dra", "not a valid label key"),
        ("gpu.example.com/allocation: dra", "gpu.example.com/allocation: dra pool", "not a valid label value"),
        ("gpu.example.com/allocation: dra", f"gpu.example.com/allocation: {LONG}", "no more than 63"),
        # Annotation values the webhook writes: cohort and policy names, bounded.
        ("- name: pilot-teams", f"- name: {'c' * 254}", "at most 253"),
        ("  name: api-valid", f"  name: {'p' * 254}", "at most 253"),
        # Annotation keys are <prefix>/<name>: the prefix a DNS subdomain.
        ("annotationPrefix: dra-migration.io", "annotationPrefix: Dra_Migration", "DNS subdomain"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None,
)
def test_refused_with_its_line(tmp_path: Path, old: str, new: str, says: str) -> None:
    problems = _problems(tmp_path, old, new)
    assert any(says in p.message for p in problems), problems


def test_every_annotation_key_the_webhook_writes_is_a_qualified_name(tmp_path: Path) -> None:
    """The longest prefix a policy may set, with every name the webhook writes under it."""
    from webhook.rules.tolerations import INJECTED_ANNOTATION
    from webhook.rules.workloads import WEBHOOK_ANNOTATIONS

    prefix = ".".join(["a" * 63] * 3) + "." + "b" * 61  # 253 characters, a valid DNS subdomain
    assert len(prefix) == 253 and not k8s_names.dns1123_subdomain(prefix)
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.replace("annotationPrefix: dra-migration.io", f"annotationPrefix: {prefix}"))
    policy = load(path)
    for name in (*WEBHOOK_ANNOTATIONS, INJECTED_ANNOTATION):
        assert k8s_names.qualified_name(policy.key(name)) == [], name


def test_names_match_upstream_examples() -> None:
    """Examples from apimachinery's validation_test.go (TestIsQualifiedName, TestIsValidLabelValue)."""
    for good in ("simple", "now-with-dashes", "1-starts-with-num", "1234", "simple/simple", "now-with-dashes/simple",
                 "now-with-dashes/now-with-dashes", "now.with.dots/simple", "now-with.dashes-and.dots/simple",
                 "1-num.2-num/3-num", "1234/5678", "1.2.3.4/5678", "Uppercase_Is_OK_123",
                 "example.com/Uppercase_Is_OK_123",
                 "requests.storage-foo", "a" * 63, "a" * 253 + "/" + "b" * 63):
        assert k8s_names.qualified_name(good) == [], good
    for bad in ("nospecialchars%^=@", "cantendwithadash-", "-cantstartwithadash-", "only/one/slash", "Example.com/abc",
                "example_com/abc", "example.com/", "/simple", "a" * 64, "a" * 254 + "/abc"):
        assert k8s_names.qualified_name(bad) != [], bad
    for good in ("", "simple", "now-with-dashes", "1-starts-with-num", "end-with-num-1", "1234", "a" * 63,
                 "Uppercase_Is_OK_123"):
        assert k8s_names.label_value(good) == [], good
    for bad in ("nospecialchars%^=@", "Tama-nui-te-rā.is.Māori.sun", "\\backslashes\\are\\bad", "-starts-with-dash",
                "ends-with-dash-", ".starts.with.dot", "ends.with.dot.", "a" * 64):
        assert k8s_names.label_value(bad) != [], bad
