"""Helpers over raw Pod and workload dicts: where pod templates live, and what they ask for.

Rules see the object exactly as the API server sent it (a dict), so everything here reads defensively:
a missing or wrongly typed field is "absent", never an exception. Paths are tuples of keys and indices
so a rule can find the same place again in its deep copy (``get_path``) and name it in a finding
(``field_path``).

Counting follows kube-scheduler (``resourcehelper.PodRequests``): for extended resources limits imply
requests, sidecars (init containers with ``restartPolicy: Always``) run next to the regular containers
and next to every init container started after them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from webhook.objects.jsonish import as_dict as _dict
from webhook.objects.jsonish import as_list as _list
from webhook.objects.quantity import MAX_ALLOWED
from webhook.objects.quantity import from_json as parse_quantity  # the one quantity parser; name kept for callers

Path = tuple[str | int, ...]

DEVICECLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
"""Implicit extended-resource name of every DeviceClass: ``deviceclass.resource.kubernetes.io/<class>``."""


def get_path(obj: Any, path: Path) -> Any:
    """The value at ``path`` or None when any step is missing or of the wrong type."""
    cur = obj
    for step in path:
        if isinstance(step, int):
            if not isinstance(cur, list) or not -len(cur) <= step < len(cur):
                return None
        elif not isinstance(cur, dict) or step not in cur:
            return None
        cur = cur[step]
    return cur


def set_path(obj: Any, path: Path, value: Any) -> None:
    """Set ``path`` to ``value``, creating missing maps on the way (list indices must exist)."""
    if not path:
        raise ValueError("set_path needs a non-empty path")
    cur = obj
    for step, following in zip(path[:-1], path[1:], strict=True):
        if isinstance(step, int) or isinstance(following, int):
            cur = cur[step]  # lists are never created: the index must exist
            continue
        nxt = cur.get(step)
        if not isinstance(nxt, dict):
            nxt = cur[step] = {}
        cur = nxt
    cur[path[-1]] = value


def field_path(path: Path) -> str:
    """``('spec', 'containers', 0, 'resources')`` -> ``spec.containers[0].resources`` (kubectl style)."""
    out = ""
    for step in path:
        if isinstance(step, int):
            out += f"[{step}]"
        elif "." in step or "/" in step:
            out += f"[{step}]"
        else:
            out += f".{step}" if out else step
    return out


@dataclass(frozen=True, slots=True)
class PodTemplateRef:
    """One pod template (``metadata`` + ``spec``) inside an object.

    ``path`` leads to the template; it is ``()`` for a Pod, whose own metadata and spec are the template.
    ``job_path`` leads to the enclosing JobSpec (Job, CronJob, JobSet) for its ``activeDeadlineSeconds``.
    ``name`` tells templates of one object apart in messages (JobSet replicated job, PyTorchJob role).
    ``scheduler`` is where the owner keeps a ``schedulerName`` its controller copies into every Pod whose
    template names none, with the value the owner's admission defaults it to (Volcano Job).
    """

    path: Path
    name: str = ""
    job_path: Path | None = None
    scheduler: tuple[Path, str] | None = None

    def template(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return _dict(get_path(obj, self.path))

    def spec(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return _dict(get_path(obj, (*self.path, "spec")))

    def metadata(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return _dict(get_path(obj, (*self.path, "metadata")))

    def spec_as_run(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The spec the controller gives the Pods: ``spec`` with the owner's ``schedulerName`` where the template
        names none (a copy then; ``spec`` itself is what patches write to)."""
        spec = self.spec(obj)
        if self.scheduler is None or spec.get("schedulerName"):
            return spec
        where, default = self.scheduler
        name = get_path(obj, where)
        return {**spec, "schedulerName": name if isinstance(name, str) and name else default}

    def at(self, *rest: str | int) -> Path:
        """A path below the template, e.g. ``ref.at('spec', 'containers', 0)``."""
        return (*self.path, *rest)

    def where(self) -> str:
        """Prefix for messages: ``[workers] `` for a named template, empty otherwise."""
        return f"[{self.name}] " if self.name else ""


# ---- where each kind keeps its pod templates --------------------------------------------------------

TemplateFinder = Callable[[Mapping[str, Any]], list[PodTemplateRef]]


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """A kind whose objects hold pod templates, identified by API group AND kind (Volcano's
    ``batch.volcano.sh`` Job is not ``batch/v1`` Job).

    ``resource`` and ``versions`` are what the webhook configurations list for it; ``pod_label`` is the
    label its controller puts on every Pod (predicted for ``trainingJobs`` matching); ``source`` names
    the upstream API type the template paths were read from.
    """

    group: str
    kind: str
    resource: str
    versions: tuple[str, ...]
    find: TemplateFinder
    pod_label: str | None = None
    source: str = ""

    @property
    def api_group_kind(self) -> str:
        return f"{self.group}/{self.kind}" if self.group else self.kind


def _one(*path: str | int, job: Path | None = None) -> TemplateFinder:
    return lambda obj: [PodTemplateRef(tuple(path), job_path=job)]


def _named_list(list_path: Path, below: Path, job_below: Path | None = None, key: str = "name",
                scheduler: tuple[Path, str] | None = None) -> TemplateFinder:
    """Templates in a list of named entries (JobSet replicatedJobs, Volcano tasks, Ray worker groups)."""

    def find(obj: Mapping[str, Any]) -> list[PodTemplateRef]:
        refs = []
        for i, entry in enumerate(_list(get_path(obj, list_path))):
            name = str(_dict(entry).get(key) or i)
            job = (*list_path, i, *job_below) if job_below is not None else None
            refs.append(PodTemplateRef((*list_path, i, *below), name=name, job_path=job, scheduler=scheduler))
        return refs

    return find


def _replica_specs(field: str) -> TemplateFinder:
    """Kubeflow training jobs: ``spec.<field>.<Role>.template`` (Master/Worker/PS/Launcher...)."""

    def find(obj: Mapping[str, Any]) -> list[PodTemplateRef]:
        return [PodTemplateRef(("spec", field, role, "template"), name=str(role))
                for role in _dict(get_path(obj, ("spec", field)))]

    return find


def _ray(cluster: Path) -> TemplateFinder:
    """A RayClusterSpec at ``cluster``: the head group's template and each worker group's."""
    workers = _named_list((*cluster, "workerGroupSpecs"), ("template",), key="groupName")

    def find(obj: Mapping[str, Any]) -> list[PodTemplateRef]:
        return [PodTemplateRef((*cluster, "headGroupSpec", "template"), name="head"), *workers(obj)]

    return find


def _lws(obj: Mapping[str, Any]) -> list[PodTemplateRef]:
    base: Path = ("spec", "leaderWorkerTemplate")
    return [PodTemplateRef((*base, "leaderTemplate"), name="leader"),
            PodTemplateRef((*base, "workerTemplate"), name="worker")]


_KUBEFLOW = "kubeflow/trainer v1 (training-operator) pkg/apis/kubeflow.org/v1"
KINDS: tuple[WorkloadKind, ...] = (
    WorkloadKind("", "Pod", "pods", ("v1",), lambda obj: [PodTemplateRef(())]),
    *(WorkloadKind("apps", k, r, ("v1",), _one("spec", "template"), source="k8s.io/api/apps/v1")
      for k, r in (("Deployment", "deployments"), ("StatefulSet", "statefulsets"),
                   ("DaemonSet", "daemonsets"), ("ReplicaSet", "replicasets"))),
    WorkloadKind("batch", "Job", "jobs", ("v1",), _one("spec", "template", job=("spec",)),
                 source="k8s.io/api/batch/v1"),
    WorkloadKind("batch", "CronJob", "cronjobs", ("v1",),
                 _one("spec", "jobTemplate", "spec", "template", job=("spec", "jobTemplate", "spec")),
                 source="k8s.io/api/batch/v1"),
    WorkloadKind("jobset.x-k8s.io", "JobSet", "jobsets", ("v1alpha2",),
                 _named_list(("spec", "replicatedJobs"), ("template", "spec", "template"), ("template", "spec")),
                 "jobset.sigs.k8s.io/jobset-name", "kubernetes-sigs/jobset api/jobset/v1alpha2"),
    *(WorkloadKind("kubeflow.org", k, r, ("v1",), _replica_specs(f), "training.kubeflow.org/job-name", _KUBEFLOW)
      for k, r, f in (("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs"), ("TFJob", "tfjobs", "tfReplicaSpecs"),
                      ("PaddleJob", "paddlejobs", "paddleReplicaSpecs"),
                      ("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs"), ("JAXJob", "jaxjobs", "jaxReplicaSpecs"))),
    WorkloadKind("kubeflow.org", "MPIJob", "mpijobs", ("v2beta1", "v1"), _replica_specs("mpiReplicaSpecs"),
                 "training.kubeflow.org/job-name", "kubeflow/mpi-operator pkg/apis/kubeflow/v2beta1"),
    WorkloadKind("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", ("v1",), _lws,
                 "leaderworkerset.sigs.k8s.io/name", "kubernetes-sigs/lws api/leaderworkerset/v1"),
    WorkloadKind("ray.io", "RayCluster", "rayclusters", ("v1",), _ray(("spec",)),
                 "ray.io/cluster", "ray-project/kuberay ray-operator/apis/ray/v1"),
    WorkloadKind("ray.io", "RayJob", "rayjobs", ("v1",), _ray(("spec", "rayClusterSpec")),
                 None, "ray-project/kuberay ray-operator/apis/ray/v1"),
    WorkloadKind("ray.io", "RayService", "rayservices", ("v1",), _ray(("spec", "rayClusterConfig")),
                 None, "ray-project/kuberay ray-operator/apis/ray/v1"),
    # Task Pods without a schedulerName get the Job's (volcano-sh/volcano pkg/controllers/job/job_controller_util.go
    # createJobPod), which Volcano's admission defaults to "volcano" (pkg/webhooks/admission/jobs/mutate
    # patchDefaultScheduler).
    WorkloadKind("batch.volcano.sh", "Job", "jobs", ("v1alpha1",),
                 _named_list(("spec", "tasks"), ("template",), scheduler=(("spec", "schedulerName"), "volcano")),
                 "volcano.sh/job-name", "volcano-sh/apis pkg/apis/batch/v1alpha1"),
)
_BY_GROUP_KIND: dict[tuple[str, str], WorkloadKind] = {(k.group, k.kind): k for k in KINDS}
_CANONICAL_GROUP: dict[str, str] = {}
for _k in KINDS:
    _CANONICAL_GROUP.setdefault(_k.kind, _k.group)  # built-in groups are listed first

WORKLOAD_KINDS: frozenset[str] = frozenset(k.kind for k in KINDS if k.kind != "Pod")
"""Kind names some workload with pod templates has (what pod rules register for; ``pod_templates`` then
checks the group)."""
POD_KINDS: frozenset[str] = WORKLOAD_KINDS | {"Pod"}


NO_NAMED_KINDS: Mapping[tuple[str, str], TemplateFinder] = MappingProxyType({})
"""No policy-named workload kinds (``pod_templates`` finds the built-in kinds' templates only)."""


def group_of(obj: Mapping[str, Any], kind: str) -> str:
    """The API group of ``obj`` from its ``apiVersion``; when it has none, the built-in group of ``kind``."""
    api_version = obj.get("apiVersion")
    if isinstance(api_version, str) and api_version:
        return api_version.rpartition("/")[0]
    return _CANONICAL_GROUP.get(kind, "")


def workload_kind(group: str, kind: str) -> WorkloadKind | None:
    """The pod-template layout of (group, kind), or None for a kind the webhook does not know."""
    return _BY_GROUP_KIND.get((group, kind))


def pod_templates(
    obj: Mapping[str, Any], kind: str, group: str | None = None,
    named: Mapping[tuple[str, str], TemplateFinder] = NO_NAMED_KINDS,
) -> list[PodTemplateRef]:
    """Every pod template in ``obj`` that has a spec (an empty list for kinds without known templates).

    Dispatch is on (group, kind): pass the request's group; without it the object's ``apiVersion`` decides.
    Built-in kinds first, then ``named``: the kinds the policy names (``CompiledPolicy.template_finders``).
    """
    key = (group_of(obj, kind) if group is None else group, kind)
    wk = _BY_GROUP_KIND.get(key)
    find = wk.find if wk is not None else named.get(key)
    if find is None:
        return []
    return [r for r in find(obj) if isinstance(get_path(obj, (*r.path, "spec")), dict)]


def pod_labels(obj: Mapping[str, Any], kind: str, ref: PodTemplateRef, group: str | None = None) -> dict[str, str]:
    """Labels that describe the Pods this template makes.

    The template's labels, over the controller object's own labels (they mark the workload as a whole,
    e.g. ``workload.example.com/kind: training`` on a Job), plus the label the kind's controller (JobSet,
    Kubeflow, LeaderWorkerSet, Volcano...) will add to every Pod.
    """
    labels: dict[str, str] = {}
    if ref.path:
        labels.update(_dict(_dict(obj.get("metadata")).get("labels")))
        wk = _BY_GROUP_KIND.get((group_of(obj, kind) if group is None else group, kind))
        implied = wk.pod_label if wk is not None else None
        if implied:
            labels.setdefault(implied, str(_dict(obj.get("metadata")).get("name") or ""))
    labels.update(_dict(ref.metadata(obj).get("labels")))
    return {str(k): str(v) for k, v in labels.items()}


KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""Kueue's queue label (kubernetes-sigs/kueue pkg/controller/constants ``QueueLabel``)."""


def kueue_queue(obj: Mapping[str, Any], ref: PodTemplateRef) -> str:
    """The Kueue LocalQueue the object or its pod template names ("": none).

    kubernetes-sigs/kueue ``pkg/controller/jobframework`` ``QueueNameForObject`` (main, read at 98e197c6) reads the
    job object's label ``kueue.x-k8s.io/queue-name`` (releases before v0.10 fell back to an annotation of that
    name); a plain Pod carries it itself, and Kueue's Deployment/StatefulSet/LeaderWorkerSet integrations put it on
    the pod template too, so the template's label counts as well.
    """
    meta = _dict(obj.get("metadata"))
    for value in (_dict(meta.get("labels")).get(KUEUE_QUEUE_LABEL),
                  _dict(meta.get("annotations")).get(KUEUE_QUEUE_LABEL),
                  _dict(ref.metadata(obj).get("labels")).get(KUEUE_QUEUE_LABEL)):
        if isinstance(value, str) and value:
            return value
    return ""


def active_deadlines(obj: Mapping[str, Any], ref: PodTemplateRef) -> list[int]:
    """``activeDeadlineSeconds`` of the pod spec and of the enclosing JobSpec, where set."""
    out = []
    for holder in (ref.spec(obj), _dict(get_path(obj, ref.job_path)) if ref.job_path is not None else {}):
        value = holder.get("activeDeadlineSeconds")
        if isinstance(value, int) and not isinstance(value, bool):
            out.append(value)
    return out


def object_name(obj: Mapping[str, Any]) -> str:
    """``metadata.name``, else ``generateName`` without its trailing dash, else empty."""
    meta = _dict(obj.get("metadata"))
    return str(meta.get("name") or str(meta.get("generateName") or "").rstrip("-"))


# ---- containers and resources ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """A container of a pod spec: ``field`` is ``containers`` or ``initContainers``."""

    field: str
    index: int
    container: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.container.get("name") or f"{self.field}[{self.index}]")

    @property
    def sidecar(self) -> bool:
        return self.field == "initContainers" and self.container.get("restartPolicy") == "Always"


def iter_containers(podspec: Mapping[str, Any]) -> Iterator[ContainerRef]:
    """Init containers, then regular containers (the scheduler's order; ephemeral ones hold no resources)."""
    for fld in ("initContainers", "containers"):
        for i, c in enumerate(_list(podspec.get(fld))):
            if isinstance(c, dict):
                yield ContainerRef(fld, i, c)


def device_count(value: Any) -> int:
    """An extended-resource quantity as a device count (rounded up; the API only admits integers)."""
    return int(math.ceil(max(-MAX_ALLOWED, min(parse_quantity(value), MAX_ALLOWED))))  # 1e999999 stays cheap


def is_extended_resource(name: str) -> bool:
    """A resource outside the native ones: ``domain/name`` not under ``kubernetes.io``, or a class's implicit name.

    Native names have no domain (``cpu``, ``memory``, ``hugepages-2Mi``) or contain ``kubernetes.io/``;
    ``requests.`` names are quota names, never container requests.
    """
    if name.startswith(DEVICECLASS_PREFIX):
        return len(name) > len(DEVICECLASS_PREFIX)
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def container_extended(container: Mapping[str, Any]) -> dict[str, int]:
    """Extended resources one container asks for; a limit without a request counts as the request."""
    resources = _dict(container.get("resources"))
    limits = _dict(resources.get("limits"))
    requests = _dict(resources.get("requests"))
    out: dict[str, int] = {}
    for name in {**limits, **requests}:
        name = str(name)
        if is_extended_resource(name):
            out[name] = device_count(requests[name] if name in requests else limits[name])
    return out


def extended_requests(
    podspec: Mapping[str, Any], group: Callable[[str], str | None] | None = None
) -> dict[str, int]:
    """Effective extended-resource request of a pod spec, as the scheduler computes it.

    ``group`` maps a resource name to the key it counts under (e.g. a legacy name to its migrated
    resource, so both add up as the same hardware); names it maps to None are skipped.
    Per key: max(sum(regular) + sum(sidecars), max over init containers of the request while it runs),
    where a non-sidecar init container runs next to the sidecars started before it and a sidecar
    runs next to those started before it and itself.
    """
    total: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}

    def grouped(container: Mapping[str, Any]) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, count in container_extended(container).items():
            key = group(name) if group is not None else name
            if key is not None:
                out[key] = out.get(key, 0) + count
        return out

    for ref in iter_containers(podspec):
        req = grouped(ref.container)
        if ref.field == "containers":
            for key, count in req.items():
                total[key] = total.get(key, 0) + count
            continue
        if ref.sidecar:
            for key, count in req.items():
                total[key] = total.get(key, 0) + count
                sidecars[key] = sidecars.get(key, 0) + count
            running = dict(sidecars)
        else:
            running = {key: sidecars.get(key, 0) + req.get(key, 0) for key in {*sidecars, *req}}
        for key, count in running.items():
            init_peak[key] = max(init_peak.get(key, 0), count)
    effective = {k: max(total.get(k, 0), init_peak.get(k, 0)) for k in sorted({*total, *init_peak})}
    return {k: v for k, v in effective.items() if v}


def requested_names(podspec: Mapping[str, Any]) -> dict[str, list[ContainerRef]]:
    """Every extended resource any container asks for (request or limit), with the containers asking for it.

    A zero quantity (``nvidia.com/gpu: 0``, common in charts whose GPU count is a value) asks for nothing: the
    scheduler skips it (kubernetes v1.36 pkg/scheduler/framework/plugins/noderesources/fit.go ``fitsRequest``:
    ``if rQuant == 0 { continue }``), so no steering, tracking or finding may come from it (issue 24 item 10).
    """
    out: dict[str, list[ContainerRef]] = {}
    for ref in iter_containers(podspec):
        for name, count in container_extended(ref.container).items():
            if count > 0:
                out.setdefault(name, []).append(ref)
    return out


def pod_claims(podspec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``spec.resourceClaims`` entries (name plus resourceClaimName or resourceClaimTemplateName)."""
    return [c for c in _list(podspec.get("resourceClaims")) if isinstance(c, dict)]


# ---- quantities the API server would not decode ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BadQuantity:
    """A resource quantity of a pod template that is no quantity: ``field`` (kubectl style), the value, and why."""

    field: str
    value: Any
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def _why_not(value: Any) -> str | None:
    try:
        parse_quantity(value)
    except ValueError as exc:
        hint = ""
        if isinstance(value, str) and ("$" in value or "{{" in value):
            hint = ("; it looks like a template variable nobody rendered: render the template (envsubst, helm "
                    "template, kustomize) and check what it produces")
        return f"{exc}{hint}"
    return None


def bad_quantities(obj: Mapping[str, Any], kind: str, group: str | None = None,
                   named: Mapping[tuple[str, str], TemplateFinder] = NO_NAMED_KINDS) -> list[BadQuantity]:
    """Resource quantities of ``obj``'s pod templates that the API server refuses when it decodes the object.

    The API server decodes every ``resources.requests``/``limits`` value (containers, init containers and the
    pod-level ``resources``) and ``overhead`` with ``Quantity.UnmarshalJSON`` (kubernetes/apimachinery
    ``pkg/api/resource/quantity.go``, read at 357557a6): an unrendered ``$GPU_PER_NODE`` or an empty string fails
    there with "quantities must match the regular expression", so no webhook ever sees such a Pod; ``null`` is
    the zero quantity and no error. Built-in kinds and the policy's ``named`` kinds, as ``pod_templates``.
    """
    out: list[BadQuantity] = []
    for ref in pod_templates(obj, kind, group, named):
        spec = ref.spec(obj)
        maps: list[tuple[Path, Any]] = [(("overhead",), spec.get("overhead"))]
        places: list[tuple[Path, Any]] = [(("resources",), spec.get("resources"))]
        places += [((c.field, c.index, "resources"), c.container.get("resources")) for c in iter_containers(spec)]
        maps += [((*at, part), _dict(resources).get(part)) for at, resources in places for part in ("limits",
                                                                                                   "requests")]
        for at, values in maps:
            for name, value in _dict(values).items():
                why = _why_not(value)
                if why is not None:
                    out.append(BadQuantity(field_path(ref.at("spec", *at, str(name))), value, why))
    return out
