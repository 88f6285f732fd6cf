"""Which namespaces the deployed webhook configuration sends to the webhook (issue #24 item 13).

The API server calls a webhook only for objects in namespaces its ``namespaceSelector`` selects (kubernetes
v1.36 staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/namespace/matcher.go,
``Matcher.MatchNamespaceSelector``; cluster-scoped objects other than Namespaces always match), and every
namespace carries the label ``kubernetes.io/metadata.name: <name>`` (set by the API server since 1.21,
``NamespaceDefaultLabelName``). ``check`` judges an object only when the cluster would send it; otherwise it
says the cluster never would. The selectors are those deploy/base/webhooks.yaml installs (``SHIPPED``, kept
in step by tests/policy/test_delivery.py), or those of the configurations given with ``--webhook-config``
(an overlay's ``kubectl kustomize`` output, or ``kubectl get mutatingwebhookconfigurations -o yaml``).

matchConditions are not evaluated here: the shipped ones look at the requesting user (the webhook's own
ServiceAccount, nodes, the scheduler) or skip objects no rule acts on (``uses-devices``, kept in step with the
rules by tests/deploy/test_match_conditions.py), so they never change what ``check`` reports for a user's manifest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from webhook.policy.compiled import NAME_LABEL as NAME_LABEL
from webhook.policy.compiled import CompiledSelector
from webhook.policy.model import LabelSelector

CONFIG_KINDS = frozenset({"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"})
SHIPPED_EXCLUDED = ("kube-system", "kube-node-lease", "cert-manager", "dra-webhook")
"""The namespaces every webhook of deploy/base/webhooks.yaml leaves out (its namespaceSelector)."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """The namespaceSelectors of the webhooks that would be called, by webhook name (None: every namespace)."""

    selectors: tuple[tuple[str, CompiledSelector | None], ...]
    source: str

    def why_not_sent(self, namespace: str, labels: Mapping[str, str] | None) -> str | None:
        """None when some webhook's selector takes ``namespace``; else why the cluster never sends its objects."""
        if not namespace or not self.selectors:
            return None
        full = {**(labels or {}), NAME_LABEL: namespace}
        if any(sel is None or sel.matches(full) for _, sel in self.selectors):
            return None
        return (f"not sent: the namespaceSelector of the webhook configuration ({self.source}) leaves out namespace "
                f"{namespace!r}, so the cluster never sends its objects to the webhook")


def shipped() -> Delivery:
    """The selectors deploy/base/webhooks.yaml installs: every namespace but ``SHIPPED_EXCLUDED``."""
    sel = LabelSelector.model_validate({"matchExpressions": [
        {"key": NAME_LABEL, "operator": "NotIn", "values": list(SHIPPED_EXCLUDED)}]})
    return Delivery((("shipped", CompiledSelector.of(sel)),), "deploy/base, as shipped")


def from_configs(docs: Iterable[Mapping[str, Any]], source: str) -> Delivery:
    """The selectors of every webhook of the Mutating/ValidatingWebhookConfigurations among ``docs``.

    Raises ValueError when there is none, or a namespaceSelector is not a label selector.
    """
    found: list[tuple[str, CompiledSelector | None]] = []
    for doc in docs:
        if not isinstance(doc, Mapping) or doc.get("kind") not in CONFIG_KINDS:
            continue
        for hook in doc.get("webhooks") or []:
            name = str(hook.get("name", ""))
            raw = hook.get("namespaceSelector")
            if not raw:
                found.append((name, None))  # absent or {}: every namespace
                continue
            try:
                found.append((name, CompiledSelector.of(LabelSelector.model_validate(raw))))
            except ValidationError as exc:
                raise ValueError(f"webhook {name}: namespaceSelector is not a label selector: "
                                 f"{exc.errors()[0]['msg']}") from None
    if not found:
        raise ValueError("no MutatingWebhookConfiguration or ValidatingWebhookConfiguration with webhooks in it")
    return Delivery(tuple(found), source)


def has_pod_template(obj: Mapping[str, Any]) -> bool:
    """Whether an object holds a pod template below its root (a mapping whose ``spec`` has a ``containers``
    list): only such a kind can be named in ``spec.workloadKinds``."""
    return any(_holds(v, 8) for k, v in obj.items() if k not in ("metadata", "status"))


def _holds(value: Any, depth: int) -> bool:
    if depth < 0:
        return False
    if isinstance(value, Mapping):
        spec = value.get("spec")
        if isinstance(spec, Mapping) and isinstance(spec.get("containers"), list):
            return True
        return any(_holds(v, depth - 1) for v in value.values())
    if isinstance(value, list):
        return any(_holds(v, depth - 1) for v in value)
    return False
