"""Issue 25 item 4 on the real API server: explicit nulls never make the webhook be skipped.

A JobSet CRD installed with a minimal schema (``spec`` kept as written with
``x-kubernetes-preserve-unknown-fields``, as training operators are often installed) keeps an explicit
``initContainers: null`` in a pod template. Before the fix, the ``uses-devices`` matchCondition joined that
null to the containers list, the API server's CEL failed (``no such overload: _+_``), and under
``failurePolicy: Ignore`` the API server skipped the webhook (k8s.io/apiserver/pkg/admission/plugin/webhook/
matchconditions/matcher.go, ``matcher.Match``): the JobSet was stored unjudged, device plugin name and all.
Each case below asks for the device plugin's name in a migrated namespace, so being sent means being denied.
The offline counterpart (every optional list and map nulled in turn) is tests/deploy/test_match_conditions_nulls.py.
"""

from __future__ import annotations

from typing import Any

from tests.e2e import kube as _kube
from tests.e2e.crds import installed, preserving_crd
from tests.e2e.objects import pod
from tests.e2e.waits import eventually

GROUP, KIND, PLURAL, VERSION = "jobset.x-k8s.io", "JobSet", "jobsets", "v1alpha2"
API = f"{GROUP}/{VERSION}"
LEGACY = "vendor.example.com/gpu"  # the device plugin's name in the e2e policy: denied when migrated
_kube.RESOURCES.setdefault(KIND, (PLURAL, True))


def _gpu_spec(ns: str) -> dict[str, Any]:
    spec = pod("trainer", ns, resource=LEGACY)["spec"]
    spec["restartPolicy"] = "Never"
    return spec


def _jobset(name: str, ns: str, replicated: list[Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": KIND, "metadata": {"name": name, "namespace": ns},
            "spec": {"replicatedJobs": replicated}}


def _workers(spec: dict[str, Any]) -> dict[str, Any]:
    return {"name": "workers", "template": {"spec": {"template": {"spec": spec}}}}


CASES = {
    "initContainers-null": lambda ns: [_workers({**_gpu_spec(ns), "initContainers": None})],
    "resourceClaims-and-volumes-null": lambda ns: [_workers({**_gpu_spec(ns), "resourceClaims": None,
                                                              "volumes": None, "tolerations": None})],
    "a-null-template-beside-the-gpu-one": lambda ns: [{"name": "launcher", "template": None},
                                                       _workers(_gpu_spec(ns))],
    "null-requests-beside-gpu-limits": lambda ns: [_workers(
        {**_gpu_spec(ns), "containers": [{**_gpu_spec(ns)["containers"][0],
                                          "resources": {"limits": {LEGACY: "1"}, "requests": None}}]})],
}


def test_a_jobset_with_nulls_is_still_sent_and_judged(kube, namespace):
    ns = namespace("mig")
    with installed(kube, preserving_crd(GROUP, VERSION, KIND, PLURAL)):
        for case, replicated in CASES.items():
            obj = _jobset("nulls", ns, replicated(ns))
            # Sent means denied (device plugin name, migrated namespace); skipped means stored.
            denied = eventually(lambda obj=obj: kube.denial(obj, dry_run=True),
                                f"the API server sending the JobSet with {case} to the webhook", 30)
            assert denied.status == 403, (case, denied.message)
            assert "legacy-resource-name" in denied.message, (case, denied.message)
            assert kube.get_or_none(API, KIND, "nulls", ns) is None, case
