"""``dra-webhook compile``: the policy's rules CEL can decide, as admission policies the API server runs (issue #28).

``validating`` (the checks of ``checks``), ``pod_mutations`` (``steering`` and ``mutating``: steer-node-pool and
track-rollout in one MutatingAdmissionPolicy per layout) and ``tolerations`` build the objects from the pieces of
``shared`` and ``layouts``; ``coverage`` lists what is compiled and why the rest stays with the webhook.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from webhook.compile.pod_mutations import compile_pod_mutations
from webhook.compile.shared import Namespaces, owner_labels, valid_until
from webhook.compile.tolerations import compile_tolerations
from webhook.compile.validating import compile_validating
from webhook.policy.compiled import CompiledPolicy


@dataclass(frozen=True, slots=True)
class Compiled:
    """The objects to apply, and the date after which they are stale (None: no date in the policy changes them)."""

    objects: list[dict[str, Any]]
    valid_until: dt.date | None
    labels: dict[str, str] = field(default_factory=dict)  # ``owner_labels``: what marks these objects as ours


def compile_admission(policy: CompiledPolicy, at: dt.datetime, namespaces: Namespaces | None = None) -> Compiled:
    """Every Validating/MutatingAdmissionPolicy and binding for ``policy`` as of ``at`` (UTC), bound to the
    namespaces the webhook configurations send (default: as deploy/base ships them), less those of
    ``namespaces.existing`` a validating policy does nothing in."""
    day = at.astimezone(dt.UTC).date()
    until = valid_until(policy, day)
    ns = namespaces or Namespaces()
    objects = [*compile_pod_mutations(policy, day, until, ns.mutating),
               *compile_tolerations(policy, day, until, ns.mutating),
               *compile_validating(policy, day, until, ns.validating, ns.existing)]
    return Compiled(objects, until, owner_labels(policy))


SUFFIX = ".dra-migration.io"


def object_names(policy_name: str) -> dict[str, list[str]]:
    """Kind -> every name ``compile_admission`` can give an object of the policy ``policy_name``, on any day and in
    any stage (``<policy>-<layout>-<rule or action>.dra-migration.io``; a binding has its policy's name). The
    reconciler's RBAC lists these as ``resourceNames`` (``reconciler_rbac``)."""
    from webhook.compile.claims import CLAIM_LAYOUTS
    from webhook.compile.layouts import LAYOUTS
    from webhook.compile.pod_mutations import RULE
    from webhook.compile.tolerations import RULE as TOLERATIONS
    from webhook.compile.validating import ACTIONS

    mutating = [*(f"{policy_name}-{lay.name}-{RULE}{SUFFIX}" for lay in LAYOUTS),
                *(f"{policy_name}-{lay.name}-{TOLERATIONS}{SUFFIX}" for lay in CLAIM_LAYOUTS)]
    validating = [f"{policy_name}-{lay.name}-{a.value.lower()}{SUFFIX}" for lay in (*LAYOUTS, *CLAIM_LAYOUTS)
                  for a in ACTIONS]
    return {"MutatingAdmissionPolicy": mutating, "MutatingAdmissionPolicyBinding": mutating,
            "ValidatingAdmissionPolicy": validating, "ValidatingAdmissionPolicyBinding": validating}



def reconciler_rules(policy_name: str) -> list[dict[str, Any]]:
    """The ClusterRole rules ``dra-webhook reconcile`` needs for the policy ``policy_name`` (deploy/compiled/rbac.yaml).

    Server-side apply is a PATCH, authorized as ``patch`` on the object's name, and, when the object is new, as
    ``create`` on that name too (kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go,
    ``PatchResource``: ``createAuthorizerAttributes`` carries ``Name`` and ``withAuthorization`` checks them before
    an apply creates). So ``create`` here carries ``resourceNames`` as well: it allows an apply that creates one
    of these names and refuses every POST (its name is empty at authorization time, which a rule with
    ``resourceNames`` never matches: pkg/apis/rbac/v1/evaluation_helpers.go ``ResourceNameMatches``). ``list`` has
    no names (the prune lists by label); ``delete`` is by name."""
    names = object_names(policy_name)
    group = "admissionregistration.k8s.io"
    rules: list[dict[str, Any]] = []
    for kinds in (("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"),
                  ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")):
        rules.append({"apiGroups": [group], "resources": [PLURALS[k] for k in kinds],
                      "resourceNames": names[kinds[0]], "verbs": ["get", "create", "patch", "delete"]})
    rules.append({"apiGroups": [group], "resources": list(PLURALS.values()), "verbs": ["list"]})
    return rules


PLURALS = {
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
}
"""The resource (URL plural) of each kind ``compile_admission`` makes."""
