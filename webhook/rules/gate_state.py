"""Which feature gates are in force for one request: the policy's, or the cluster's for ``auto`` gates.

Kept apart from the gate catalogue so the rule and the ``gates`` command agree (webhook.gates.cluster);
the request path only asks the view for its last background reading and looks up a cached merge.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.gates.cluster import MergeCache
from webhook.rules.base import Context

_CACHE = MergeCache()


def gates_in_force(ctx: Context) -> tuple[Mapping[str, bool], str | None]:
    """(gate -> enabled, note): the note says why cluster values were wanted but not used.

    Without cluster data the policy's explicit values, else the version's defaults apply; the rule puts
    the note in its ``Outcome.degraded`` (an audit annotation) only when an ``auto`` gate decided something.
    """
    policy = ctx.policy
    sources = policy.gate_sources
    if not sources.auto:
        return policy.gates, None
    reading = ctx.view.feature_gates()
    if reading.value is None:
        why = reading.reason or "no cluster connection"
        return policy.gates, (
            f"feature gates of the cluster unknown ({why}): featureGates auto fell back to the policy's "
            f"values and the Kubernetes {policy.spec.kubernetesVersion} defaults"
        )
    return _CACHE.get(sources, reading.value.enabled), None
