"""matchConditions are total over explicit nulls (issue 25 item 4).

Custom resources whose schemas preserve unknown fields (JobSet, PyTorchJob and other training CRDs
installed with minimal schemas) keep an explicit ``null`` where a list or map is optional. Before the
fix, ``initContainers: null`` made ``uses-devices`` fail on the real API server (``no such overload:
_+_``: a null joined to a list), and under ``failurePolicy: Ignore`` the API server then skips the
webhook (k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions/matcher.go, ``matcher.Match``,
v1.36): the object is admitted unjudged. The real API server is the judge in
tests/e2e/test_custom_kinds.py; here every generated object with one optional list or map (or list
element) set to null is evaluated offline with the same CEL runtime as tests/deploy/test_match_conditions.py,
and must (a) not fail and (b) be sent exactly when the same object without that field is sent: a null
is an absent field, as ``has()`` and the webhook's own template walk (webhook.objects.pods) treat it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders.match_conditions import (
    TEMPLATE_AT,
    container,
    device_specs,
    plain_spec,
    request,
    sent,
    workload_hooks,
    wrap,
)

Path = tuple[str | int, ...]


def _containers(node: Any, at: Path = ()) -> Iterator[Path]:
    """Every path to a map or list inside ``node`` (the root excluded)."""
    if isinstance(node, dict):
        items: Iterator[tuple[str | int, Any]] = iter(node.items())
    elif isinstance(node, list):
        items = iter(enumerate(node))
    else:
        return
    for key, value in items:
        if isinstance(value, dict | list):
            yield (*at, key)
            yield from _containers(value, (*at, key))


def _parent(obj: Any, path: Path) -> Any:
    for step in path[:-1]:
        obj = obj[step]
    return obj


def nulled(obj: dict[str, Any], path: Path) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    _parent(out, path)[path[-1]] = None
    return out


def absent(obj: dict[str, Any], path: Path) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    parent = _parent(out, path)
    if isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent.pop(path[-1])  # type: ignore[arg-type]
    return out


def objects(kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "plain", wrap(kind, plain_spec())
    for trigger, spec in device_specs():
        yield trigger, wrap(kind, spec)


def _no_metadata(path: Path) -> bool:
    return "metadata" not in path


@pytest.mark.parametrize("kind", list(TEMPLATE_AT))
def test_a_null_in_any_optional_list_or_map_is_an_absent_field(kind: str) -> None:
    checked = 0
    for label, obj in objects(kind):
        for path in filter(_no_metadata, _containers(obj)):
            with_null, without = nulled(obj, path), absent(obj, path)
            for name in workload_hooks():
                want = sent(name, request(kind), without)
                assert sent(name, request(kind), with_null) == want, (name, kind, label, path)
                checked += 1
    assert checked > 1000, checked


@pytest.mark.parametrize("kind", list(TEMPLATE_AT))
def test_gpu_containers_beside_a_null_init_container_list_are_sent(kind: str) -> None:
    """The reported bypass: ``initContainers: null`` and a GPU container, in every pod-carrying kind."""
    spec = {"initContainers": None, "containers": [container(limits={"nvidia.com/gpu": "1"})]}
    for name in workload_hooks():
        assert sent(name, request(kind), wrap(kind, spec)), (name, kind)


def test_cronjob_job_template_scheduling_is_sent() -> None:
    """Issue 25 item 3: WorkloadWithJob also guards a CronJob's spec.jobTemplate.spec.scheduling."""
    cron = wrap("CronJob", plain_spec())
    cron["spec"]["jobTemplate"]["spec"]["scheduling"] = {"podGroupTemplates": [{"name": "workers"}]}
    for name in workload_hooks():
        assert sent(name, request("CronJob"), cron)
        assert not sent(name, request("CronJob"), nulled(cron, ("spec", "jobTemplate", "spec", "scheduling")))
