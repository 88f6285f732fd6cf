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
