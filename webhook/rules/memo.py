"""What every rule of one request would otherwise compute again: one pass over a pod spec's requests per request.

A request runs up to a dozen rules over the same object, and most of them start from the same pure functions of a
pod spec: ``placement.usage`` (which names the spec asks for, under the policy), ``objects.pods.requested_names``
and the templates the rules examine. ``Memo`` (one per request, on ``Context.memo``, built with the context by the
engine) keeps each answer for the object it was computed from, so the rules stay pure functions of
``(obj, ctx)``: an answer is looked up by the object's identity and kept with the object itself, so the object
cannot be freed and its id reused while the request runs; a mutating rule's copy is a new object and gets its own
answer. Nothing outlives the request. Objects are never modified in place (``README.md``, "What a rule may do"),
which is what makes an answer by identity the answer by value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from webhook.objects.pods import ContainerRef, PodTemplateRef, requested_names
from webhook.policy.placement import Usage, usage

T = TypeVar("T")


class Memo:
    """Answers of pure functions for one request, by (what, the object's identity); the object is kept with them."""

    __slots__ = ("_answers",)

    def __init__(self) -> None:
        self._answers: dict[tuple[Any, ...], tuple[object, Any]] = {}

    def get(self, what: str, of: object, compute: Callable[[], T]) -> T:
        """``compute()`` the first time ``what`` is asked of ``of`` in this request, the same answer after."""
        key = (what, id(of))
        found = self._answers.get(key)
        if found is not None and found[0] is of:
            answer: T = found[1]
            return answer
        answer = compute()
        self._answers[key] = (of, answer)
        return answer

    def get_of_parts(self, what: str, parts: tuple[object, object], compute: Callable[[], T]) -> T:
        """As ``get``, for an answer that depends only on two parts of an object (kept, and compared, both)."""
        key = (what, id(parts[0]), id(parts[1]))
        found = self._answers.get(key)
        if found is not None and found[0][0] is parts[0] and found[0][1] is parts[1]:  # type: ignore[index]
            answer: T = found[1]
            return answer
        answer = compute()
        self._answers[key] = (parts, answer)
        return answer


def names_of(podspec: Mapping[str, Any], memo: Memo) -> dict[str, list[ContainerRef]]:
    """``requested_names(podspec)``, once per request for the same containers: it reads ``initContainers`` and
    ``containers`` only, so a mutated copy of the spec (steered: a new affinity) that shares them shares the answer.
    Read it, never change it: it is shared."""
    parts = (podspec.get("initContainers"), podspec.get("containers"))
    return memo.get_of_parts("names", parts, lambda: requested_names(podspec))


def usage_of(podspec: Mapping[str, Any], policy: Any, memo: Memo) -> Usage:
    """``placement.usage(podspec, policy)``, once per spec and request (the request has one policy)."""
    return memo.get("usage", podspec, lambda: usage(podspec, policy, names_of(podspec, memo)))


def templates_of(obj: Mapping[str, Any], what: str, compute: Callable[[], list[PodTemplateRef]],
                 memo: Memo) -> list[PodTemplateRef]:
    """The templates ``compute`` finds in ``obj`` (``what`` names the finder), once per object and request."""
    return memo.get(what, obj, compute)
