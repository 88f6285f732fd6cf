"""Issue 27 items 3 and 4: `dra-webhook convert` rewrites manifests into the policy's DRA form, keeps everything
else as it was, and what it writes is what `check` admits at the target stage; a second run changes nothing."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import yaml

from webhook.admission.answer import admit
from webhook.cli import main
from webhook.convert.documents import split
from webhook.convert.file import Settings, convert_text
from webhook.convert.plan import pinned
from webhook.objects.pods import object_name
from webhook.offline.inputs import read_items
from webhook.offline.views import input_view
from webhook.policy.defaults import default_policy
from webhook.policy.loader import load

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT / "tests" / "data" / "upstream"
CORPUS = sorted(p for p in UPSTREAM.glob("*.yaml") if p.name not in ("policy.yaml", "cases.yaml"))
NOW = dt.datetime(2026, 12, 3, tzinfo=dt.UTC)


def _settings(policy_path: Path, claims: bool, stage: str = "migrated", namespace: str = "ml-train") -> Settings:
    return Settings(pinned(load(policy_path), stage), stage, namespace, claims, NOW)


def _check(path: Path, settings: Settings) -> list[tuple[str, bool, str, bool]]:
    """`check`'s reading of a file (read_items, the file as the cluster view, admit) under the pinned policy:
    (object, allowed, message, whether the webhook's patch writes anything but its annotations)."""
    items = read_items(str(path), settings.namespace, "CREATE")
    view = input_view([i.request for i in items])
    out = []
    for item in items:
        a = admit(item.request, settings.policy, view, NOW)
        drift = _without_tracking(a.final) != _without_tracking(item.request.object)
        out.append((f"{item.request.kind} {object_name(item.request.object or {})}", a.allowed, a.message, drift))
    return out


@pytest.mark.parametrize("claims", [False, True], ids=["policy-form", "claims"])
def test_whole_corpus_round_trips(tmp_path: Path, claims: bool) -> None:
    settings = _settings(UPSTREAM / "policy.yaml", claims)
    converted = 0
    for path in CORPUS:
        text = path.read_text()
        result = convert_text(str(path), text, settings)
        done = [e for e in result.entries if e.status == "converted"]
        converted += len(done)
        if not done:
            assert result.after == text, path.name  # nothing converted: the file byte for byte
            continue
        # Unchanged documents are byte-identical and in order; the changed ones pass `check` at the stage.
        before = [d.separator + d.text for d in split(text)]
        after = [d.separator + d.text for d in split(result.after)]
        kept = iter(after)
        changed = {e.source.rsplit("#", 1)[1] for e in done}
        number = 0
        for doc in split(text):
            if doc.plain() is not None:
                number += 1
            if str(number) not in changed or doc.plain() is None:
                assert doc.separator + doc.text in kept, (path.name, doc.text[:200])
        assert len(after) == len(before) + sum(len(e.generated) for e in done)
        out = tmp_path / path.name
        out.write_text(result.after)
        names = {f"{e.object.split()[0]} {e.object.rsplit('/', 1)[-1].split()[-1]}" for e in done}
        names |= {g for e in done for g in e.generated}
        checked = [c for c in _check(out, settings) if c[0] in names]
        assert len(checked) == len(names), (path.name, names, checked)
        for what, allowed, message, drift in checked:
            assert allowed, (path.name, what, message)
            # Claims only: the webhook steers nothing and injects nothing into what convert wrote.
            assert not (claims and drift), (path.name, what)
        # Idempotence: the output converts to itself.
        again = convert_text(str(out), result.after, settings)
        assert again.after == result.after, path.name
        assert not [e for e in again.entries if e.status == "converted"], path.name
    # Issue 45: a Kueue-queued job and a KubeRay group whose GPUs Ray reads from the limits are left alone (with
    # claims): test_corpus_convert_decisions checks them.
    assert converted >= (14 if claims else 3)


def test_claims_form_is_what_the_training_rules_ask_for(tmp_path: Path) -> None:
    """A training job (default policy: label workload.example.com/kind=training) gets a ResourceClaimTemplate with
    the policy's device tolerations, and then neither `training-job-extended-resource` nor
    `inject-device-tolerations` has anything to say; comments and quotes outside the edit are kept."""
    src = tmp_path / "train.yaml"
    src.write_text(TRAINING_JOB)
    code = main(["convert", "-w", "-n", "ml-a", str(src)])
    assert code == 0
    text = src.read_text()
    assert '# the team\'s trainer\n' in text and 'image: "registry.example.com/trainer:1.0"  # pinned' in text
    assert "vendor.example.com/gpu" not in text and "cpu: '2'" in text
    assert "      containers:\n        - name: trainer\n" in text  # the document's indented sequences
    docs = list(yaml.safe_load_all(text))
    job, rct = docs
    assert rct["kind"] == "ResourceClaimTemplate"
    assert rct["metadata"] == {"name": "train-gpu"}  # as the Job: no namespace
    request = rct["spec"]["spec"]["devices"]["requests"][0]
    assert request["name"] == "trainer"
    assert request["exactly"]["deviceClassName"] == "gpu.example.com" and request["exactly"]["count"] == 2
    assert request["exactly"]["tolerations"] == [
        {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3600},
        {"key": "example.com/ecc-degraded", "operator": "Equal", "value": "correctable", "effect": "NoSchedule"}]
    spec = job["spec"]["template"]["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "train-gpu"}]
    assert spec["containers"][0]["resources"] == {"requests": {"cpu": "2"}, "claims": [{"name": "gpu",
                                                                                       "request": "trainer"}]}
    settings = _settings(default_policy(), claims=False, namespace="ml-a")
    items = read_items(str(src), "ml-a", "CREATE")
    view = input_view([i.request for i in items])
    for item in items:
        a = admit(item.request, settings.policy, view, NOW)
        assert a.allowed and not a.findings(), (item.request.kind, a.message, a.findings())
        # Drift: the webhook writes no toleration and no node affinity into what convert wrote (annotations only).
        assert _without_tracking(a.final) == _without_tracking(item.request.object), a.patch


def _without_tracking(obj: object) -> object:
    """``obj`` without the webhook's annotations (and the maps that held only them)."""
    if isinstance(obj, list):
        return [_without_tracking(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {}
    for k, v in obj.items():
        if k == "annotations":
            v = {a: b for a, b in v.items() if not a.startswith("dra-migration.io/")}
        v = _without_tracking(v)
        if v != {} or k not in ("annotations", "metadata"):
            out[k] = v
    return out


TRAINING_JOB = """\
# the team's trainer
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  labels: {workload.example.com/kind: training}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: trainer
          image: "registry.example.com/trainer:1.0"  # pinned
          resources:
            requests:
              cpu: '2'
              vendor.example.com/gpu: 2
            limits:
              vendor.example.com/gpu: 2   # the device plugin's name
"""


def test_legacy_name_is_renamed_in_place_and_own_name_stays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "serve.yaml"
    src.write_text(SERVING)
    assert main(["convert", "-n", "ml-a", str(src)]) == 0
    out = capsys.readouterr()
    name = str(src).lstrip("/")
    assert out.out.splitlines()[:2] == [f"--- a/{name}", f"+++ b/{name}"]
    assert "-            vendor.example.com/gpu: 1  # one card\n+            example.com/gpu: 1  # one card" \
        in out.out
    assert src.read_text() == SERVING  # a diff only
    assert "Deployment ml-a/plain: stays as it is: example.com/gpu is served through DRA" in out.err
    assert main(["convert", "--check", "-n", "ml-a", str(src)]) == 1
    assert f"would convert {src}" in capsys.readouterr().err
    assert main(["convert", "-w", "-n", "ml-a", str(src)]) == 0
    assert main(["convert", "--check", "-n", "ml-a", str(src)]) == 0
    assert src.read_text() == SERVING.replace("vendor.example.com/gpu: 1  # one card", "example.com/gpu: 1  # one card")


SERVING = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: legacy}
spec:
  template:
    spec:
      containers:
      - name: server
        image: registry.example.com/server:1.0
        resources:
          limits:
            cpu: 1
            vendor.example.com/gpu: 1  # one card
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: plain}
spec:
  template:
    spec:
      containers:
      - name: server
        image: registry.example.com/server:1.0
        resources: {limits: {example.com/gpu: 1}}
"""


def test_what_cannot_be_converted_is_left_alone_with_a_reason(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    helm = tmp_path / "chart.yaml"
    helm.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: {{ .Release.Name }}}\n")
    unknown = tmp_path / "crd.yaml"
    unknown.write_text("apiVersion: example.com/v1\nkind: Trainer\nmetadata: {name: t}\nspec:\n  template:\n"
                       "    spec:\n      containers: [{name: c, resources: {limits: {vendor.example.com/gpu: 1}}}]\n")
    too_many = tmp_path / "big.yaml"
    too_many.write_text(SERVING.split("---\n")[0].replace("vendor.example.com/gpu: 1", "vendor.example.com/gpu: 9"))
    as_json = tmp_path / "pod.json"
    as_json.write_text('{"apiVersion": "v1", "kind": "Pod"}')
    before = {p: p.read_text() for p in (helm, unknown, too_many, as_json)}
    assert main(["convert", "-w", "-o", "json", "-n", "ml-a", str(helm), str(unknown), str(too_many),
                 str(as_json)]) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    assert all(p.read_text() == text for p, text in before.items())
    reasons = {f["file"]: [o["reason"] for o in f["objects"]] for f in files}
    assert "a template ({{ ... at line 3)" in reasons[str(helm)][0]
    assert "name it in the policy's spec.workloadKinds" in reasons[str(unknown)][0]
    # max-devices-per-pod denies 9 devices in either form: convert does not write a denied object.
    assert "would be denied at the target stage" in reasons[str(too_many)][0]
    assert "max-devices-per-pod" in reasons[str(too_many)][0]
    assert "a JSON manifest" in reasons[str(as_json)][0]


def test_a_quantity_that_is_none_is_an_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 45 item 2: ``$GPU_PER_NODE`` made convert print a traceback and exit 1 (what --check says for "would
    change"); now exit 2 with file, document, object, field and value, the file untouched, the others converted."""
    src = tmp_path / "train.yaml"
    src.write_text(SERVING + "---\n" + SERVING.split("---\n")[0].replace("name: legacy", "name: templated")
                   .replace("vendor.example.com/gpu: 1  # one card", "vendor.example.com/gpu: $GPU_PER_NODE"))
    for mode in ("--check", "-w"):
        assert main(["convert", mode, "-n", "ml-a", str(src)]) == 2
        err = capsys.readouterr().err
        assert f"input error: {src}#3: Deployment ml-a/templated: spec.template.spec.containers[0].resources.limits" \
            "[vendor.example.com/gpu]: '$GPU_PER_NODE' is not a quantity" in err, err
        assert "Traceback" not in err
    assert "example.com/gpu: 1  # one card" in src.read_text() and "$GPU_PER_NODE" in src.read_text()


NOISY = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
---

apiVersion: batch/v1
kind: Job
metadata: {name: train, labels: {workload.example.com/kind: training}}
spec:
  template:
    spec:
      restartPolicy: Never\x20
      containers:
      - name: trainer
        image: registry.example.com/trainer:1.0
        resources:
          limits:
            vendor.example.com/gpu: 2
      - name: helper
        image: registry.example.com/helper:1.0
        command:
           - sh
           - -c
           - |
              cat <<EOF
              ready
              EOF
        env: [{name: A, value: "1"}, {name: B, value: "2"}]
"""


def test_lines_outside_the_edit_stay_byte_for_byte(tmp_path: Path) -> None:
    """Issue 45 item 6: a sibling with 3-space indentation and a heredoc, a flow mapping, a trailing space and a blank
    line after `---` come out as they were; the diff removes only the device ask."""
    import difflib

    src = tmp_path / "train.yaml"
    src.write_text(NOISY)
    assert main(["convert", "-w", "-n", "ml-a", str(src)]) == 0
    after = src.read_text()
    removed = [line for line in difflib.ndiff(NOISY.splitlines(keepends=True), after.splitlines(keepends=True))
               if line.startswith("- ")]
    assert removed == ["-           limits:\n", "-             vendor.example.com/gpu: 2\n"]
    job = list(yaml.safe_load_all(after))[1]
    assert job["spec"]["template"]["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName":
                                                                  "train-gpu"}]
    assert main(["convert", "--check", "-n", "ml-a", str(src)]) == 0  # and a second run changes nothing


def test_policy_workload_kinds_are_converted(tmp_path: Path) -> None:
    """The bundled policy names SparkApplication (spec.driver.template, spec.executor.template)."""
    src = tmp_path / "spark.yaml"
    src.write_text("apiVersion: sparkoperator.k8s.io/v1beta2\nkind: SparkApplication\nmetadata: {name: etl}\n"
                   "spec:\n  executor:\n    template:\n      spec:\n        containers:\n        - name: ex\n"
                   "          resources: {limits: {vendor.example.com/gpu: 1}}\n")
    assert main(["convert", "-w", "--claims", "-n", "ml-a", str(src)]) == 0
    spark, rct = yaml.safe_load_all(src.read_text())
    spec = spark["spec"]["executor"]["template"]["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "etl-executor-gpu"}]
    assert rct["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu.example.com"


def test_stdin_and_write_print_the_converted_text(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(SERVING))
    assert main(["convert", "-w", "-n", "ml-a", "-"]) == 0
    assert capsys.readouterr().out == SERVING.replace("vendor.example.com/gpu", "example.com/gpu")


@pytest.mark.parametrize(("file", "reason"), [
    ("kai-gpu-pod.yaml", 'schedulerName "kai-scheduler" does not allocate DRA devices'),
    ("hami-default-use.yaml", "asks for nvidia.com/gpumem, which no policy resource maps"),
    ("trainer-runtime-torchtune-llama3-2-1b.yaml", "name it in the policy's spec.workloadKinds"),
    # issue 45 item 5 (device-plugin-slice): a MIG-single Pod asks for a slice; a claim on gpu.nvidia.com is a GPU
    ("nvidia-docs-mig-single-pod.yaml", "MIG slice: DRA would give a whole device; ask DeviceClass mig.nvidia.com"),
])
def test_corpus_objects_left_alone_say_why(file: str, reason: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", "--claims", "-o", "json", "--policy", str(UPSTREAM / "policy.yaml"), "-n", "ml-train",
                 str(UPSTREAM / file)]) == 0
    (result,) = json.loads(capsys.readouterr().out)["files"]
    assert not result["changed"]
    assert [o["status"] for o in result["objects"]] == ["skipped"]
    assert reason in result["objects"][0]["reason"]


CASES = [c for c in yaml.safe_load((UPSTREAM / "cases.yaml").read_text()) if c.get("convert")]


@pytest.mark.rule("training-job-extended-resource")
@pytest.mark.parametrize("case", CASES, ids=[f"{c['file']}@{c.get('namespace', '-')}" for c in CASES])
def test_corpus_convert_decisions(case: dict, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 45 items 1 and 4: a Kueue-queued job whose class Kueue is not said to map, and a KubeRay group whose GPUs
    Ray reads from the limits, are left alone with the reason; a Ray group that states num-gpus is converted."""
    args = ["convert", "--claims", "-o", "json", "--policy", str(UPSTREAM / "policy.yaml")]
    assert main([*args, "-n", case.get("namespace", "default"), str(UPSTREAM / case["file"])]) == 0
    (result,) = json.loads(capsys.readouterr().out)["files"]
    got = {o["object"]: o for o in result["objects"]}
    for want in case["convert"]:
        entry = got[want["object"]]
        assert entry["status"] == want["status"], entry
        for text in want.get("says", []):
            assert text in entry.get("reason", ""), (text, entry)


KUEUE_JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  labels:
    kueue.x-k8s.io/queue-name: team-a   # Kueue queues it
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: registry.example.com/trainer:1.0
        resources:
          limits:
            vendor.example.com/gpu: 2
"""


def test_kueue_queued_job_is_converted_once_the_policy_says_kueue_maps_the_class(tmp_path: Path,
                                                                                capsys: pytest.CaptureFixture[str]):
    """Issue 45 item 1: left alone without spec.quota.kueue; converted when the policy copies the cluster's Kueue
    deviceClassMappings with the class (Kueue then charges the claims to the queue's quota)."""
    src = tmp_path / "train.yaml"
    src.write_text(KUEUE_JOB)
    assert main(["convert", "--claims", "-o", "json", "-n", "ml-a", str(src)]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["files"][0]["objects"]
    assert entry["status"] == "skipped"
    assert "does not map DeviceClass gpu.example.com" in entry["reason"]
    doc = yaml.safe_load(default_policy().read_text())
    doc["spec"]["quota"] = {"kueue": {"deviceClassMappings": [{"name": "gpus", "deviceClassNames":
                                                               ["gpu.example.com"]}]}}
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(doc))
    assert main(["convert", "--claims", "-w", "--policy", str(policy), "-n", "ml-a", str(src)]) == 0
    job, rct = yaml.safe_load_all(src.read_text())
    assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a"}
    assert rct["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu.example.com"


def test_ray_group_that_states_num_gpus_is_converted(tmp_path: Path) -> None:
    """Issue 45 item 4: with rayStartParams num-gpus (what KubeRay and the Ray autoscaler read first) the claims
    leave Ray's view of the group as it was."""
    text = (UPSTREAM / "kuberay-service-stable-diffusion.yaml").read_text().replace(
        "      rayStartParams: {}\n", "      rayStartParams: {num-gpus: \"1\"}\n")
    src = tmp_path / "ray.yaml"
    src.write_text(text)
    assert main(["convert", "--claims", "-w", "--policy", str(UPSTREAM / "policy.yaml"), "-n", "ml-train",
                 str(src)]) == 0
    service, rct = yaml.safe_load_all(src.read_text())
    group = service["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    assert group["rayStartParams"] == {"num-gpus": "1"}
    assert "nvidia.com/gpu" not in group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert rct["metadata"]["name"] == "stable-diffusion-gpu-group-gpu"


def test_owned_objects_and_init_containers_are_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    owned = tmp_path / "rs.yaml"
    owned.write_text("apiVersion: apps/v1\nkind: ReplicaSet\nmetadata:\n  name: web-1\n  ownerReferences:\n"
                     "  - {apiVersion: apps/v1, kind: Deployment, name: web, uid: u, controller: true}\n"
                     "spec:\n  template:\n    spec:\n      containers:\n      - name: c\n"
                     "        resources: {limits: {vendor.example.com/gpu: 1}}\n")
    init = tmp_path / "init.yaml"
    init.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  initContainers:\n  - name: warm\n"
                    "    resources: {limits: {example.com/gpu: 1}}\n  containers:\n  - name: c\n"
                    "    resources: {limits: {example.com/gpu: 1}}\n")
    assert main(["convert", "--claims", "-o", "json", "-n", "ml-a", str(owned), str(init)]) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    assert [f["changed"] for f in files] == [False, False]
    assert "controlled by Deployment/web" in files[0]["objects"][0]["reason"]
    assert "init container warm asks for devices" in files[1]["objects"][0]["reason"]


@pytest.mark.parametrize(("text", "want"), [
    ("a:\n  b:\n  - c: 1\n", (2, 0)),
    ("a:\n  b:\n    - c: 1\n", (2, 2)),
    ("a:\n    b:\n      - c: 1\n", (4, 2)),
    ("a: 1\n", (2, 0)),
])
def test_indentation_is_taken_from_the_document(text: str, want: tuple[int, int]) -> None:
    from webhook.convert.documents import guess_indent

    assert guess_indent(text) == want


@pytest.mark.parametrize(("text", "reason"), [
    ("x: &r {limits: {vendor.example.com/gpu: 1}}\n", "anchors, aliases or merge keys"),
    ("metadata: {name: dup}\nmetadata: {name: dup}\n", "not read as a round-trip document"),
])
def test_documents_ruamel_would_get_wrong_are_left_alone(tmp_path: Path, text: str, reason: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "odd.yaml"
    src.write_text(SERVING.split("---\n")[0] + text)
    assert main(["convert", "-o", "json", "-n", "ml-a", str(src)]) == 0
    (result,) = json.loads(capsys.readouterr().out)["files"]
    assert not result["changed"] and reason in result["objects"][0]["reason"], result


def test_target_stage_is_pinned_for_every_cohort_and_the_default() -> None:
    policy = load(default_policy())
    for stage in ("pilot", "migrated"):
        target = pinned(policy, stage)
        assert target.identity == policy.identity
        assert {target.stage_for(c, dt.datetime(1999, 1, 1, tzinfo=dt.UTC)) for c in target.cohorts} == {stage}
        assert target.stage_for(None, NOW) == stage
    assert {policy.stage_for(c, dt.datetime(1999, 1, 1, tzinfo=dt.UTC)) for c in policy.cohorts} == {"legacy"}


def test_pilot_stage_form(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Outside every cohort (default stage legacy) the object is still written in the asked stage's form."""
    src = tmp_path / "serve.yaml"
    src.write_text(SERVING)
    assert main(["convert", "--stage", "pilot", "-o", "json", "-n", "team-x", str(src)]) == 0
    (result,) = json.loads(capsys.readouterr().out)["files"]
    assert [o["status"] for o in result["objects"]] == ["converted", "unchanged"]
    assert "in the pilot stage" in result["objects"][1]["notes"][0]


def test_generated_names_never_collide_within_a_run(tmp_path: Path) -> None:
    for kind, api in (("Job", "batch/v1"), ("Deployment", "apps/v1")):
        (tmp_path / f"{kind}.yaml").write_text(TRAINING_JOB.replace("kind: Job", f"kind: {kind}")
                                               .replace("apiVersion: batch/v1", f"apiVersion: {api}"))
    assert main(["convert", "-w", "-n", "ml-a", str(tmp_path)]) == 0
    names = [list(yaml.safe_load_all((tmp_path / f"{k}.yaml").read_text()))[1]["metadata"]["name"]
             for k in ("Deployment", "Job")]
    assert names == ["train-gpu", "train-gpu-2"]


_POD = {"containers": [{"name": "main", "image": "x", "resources": {"limits": {"vendor.example.com/gpu": 2}}}]}


@pytest.mark.parametrize(("obj", "spec_path", "template"), [
    ({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
      "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": _POD}}}}},
     ("spec", "jobTemplate", "spec", "template", "spec"), "nightly-gpu"),
    ({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
      "spec": {"template": {"spec": _POD}}}, ("spec", "template", "spec"), "db-gpu"),
    ({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
      "spec": {"replicatedJobs": [{"name": "workers", "template": {"spec": {"template": {"spec": _POD}}}}]}},
     ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec"), "js-workers-gpu"),
    ({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt"},
      "spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": _POD}}}}},
     ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec"), "pt-worker-gpu"),
])
def test_every_template_layout_is_converted(tmp_path: Path, obj: dict, spec_path: tuple, template: str) -> None:
    from webhook.objects.pods import get_path

    src = tmp_path / "w.yaml"
    src.write_text(yaml.safe_dump(obj, sort_keys=False))
    assert main(["convert", "-w", "--claims", "-n", "ml-a", str(src)]) == 0
    converted, rct = yaml.safe_load_all(src.read_text())
    spec = get_path(converted, spec_path)
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": template}]
    assert spec["containers"][0]["resources"] == {"claims": [{"name": "gpu", "request": "main"}]}
    assert rct["metadata"]["name"] == template
    assert rct["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2


CONVERTED = SERVING.replace("vendor.example.com/gpu", "example.com/gpu")


def _tree_with_links(tmp_path: Path) -> tuple[Path, Path]:
    """``repo/`` holds a file, a link to it, and a relative and an absolute link into ``other/`` (another checkout)."""
    repo, other = tmp_path / "repo", tmp_path / "other"
    (repo / "apps").mkdir(parents=True)
    other.mkdir()
    (repo / "apps" / "serve.yaml").write_text(SERVING)
    (other / "theirs.yaml").write_text(SERVING)
    (other / "abs.yaml").write_text(SERVING)
    (repo / "apps" / "alias.yaml").symlink_to("serve.yaml")
    (repo / "rel.yaml").symlink_to(Path("..") / "other" / "theirs.yaml")
    (repo / "abs.yaml").symlink_to(other / "abs.yaml")
    return repo, other


def test_write_never_goes_through_a_link_out_of_the_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 47 item 3: ``convert -R -w repo`` rewrote other/ through repo's relative and absolute links."""
    repo, other = _tree_with_links(tmp_path)
    assert main(["convert", "-R", "-w", "-n", "ml-a", str(repo)]) == 0
    err = capsys.readouterr().err
    assert (other / "theirs.yaml").read_text() == SERVING
    assert (other / "abs.yaml").read_text() == SERVING
    for link, target in (("rel.yaml", "theirs.yaml"), ("abs.yaml", "abs.yaml")):
        assert (f"{repo / link}: not written: a symbolic link to {(other / target).resolve()}, outside the paths "
                f"given ({repo}); name that file to convert it") in err
    assert (repo / "apps" / "serve.yaml").read_text() == CONVERTED
    assert (repo / "apps" / "alias.yaml").is_symlink()  # written through, not replaced by a copy
    assert f"{repo / 'apps' / 'serve.yaml'}: not written: the same file as {repo / 'apps' / 'alias.yaml'}" in err


def test_a_link_named_on_the_command_line_is_followed(tmp_path: Path) -> None:
    repo, other = _tree_with_links(tmp_path)
    assert main(["convert", "-w", "-n", "ml-a", str(repo / "rel.yaml")]) == 0
    assert (other / "theirs.yaml").read_text() == CONVERTED
    assert (repo / "rel.yaml").is_symlink()


def test_a_file_name_with_a_newline_is_quoted_in_the_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 47 item 6: a name with a newline forged a line of the diff header (``+++ b/x`` then a free line)."""
    src = tmp_path / "a\n+++ b" / "evil.yaml"
    src.parent.mkdir()
    src.write_text(SERVING)
    assert main(["convert", "-n", "ml-a", str(src)]) == 0
    out = capsys.readouterr()
    name = str(src).lstrip("/").replace("\n", "\\n")
    assert out.out.splitlines()[:2] == [f'--- "a/{name}"', f'+++ "b/{name}"']
    assert not [line for line in out.err.splitlines() if line.startswith("+++ b")]  # no forged line on stderr
    assert f'"{str(src)}#1"'.replace("\n", "\\n") in out.err
