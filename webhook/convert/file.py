"""``convert`` for one file: each document decided, rewritten and then checked through the webhook's own path.

Per document: the plain object (as ``check`` reads it) is planned (``convert_plan``); a document with edits is
rewritten on its round-trip tree (``convert_rewrite``) with its ResourceClaimTemplates as new documents right
after it. Then every rewritten object goes through ``admission.admit``, mutate then validate, on the policy pinned
at the target stage and with the file's objects (the new templates included) as the cluster view, as ``check``
would run it. A rewrite the webhook would deny is dropped and the document kept as it was, with the denial as
the reason: convert never writes what the target stage refuses.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from webhook.admission.review import AdmissionRequest
from webhook.convert.documents import Document, NotConvertible, Tree, dump_new, join, keep_untouched, split
from webhook.convert.plan import Plan, due_stage, pinned, plan_object
from webhook.convert.rewrite import apply, template_name
from webhook.objects.pods import bad_quantities, object_name
from webhook.offline.inputs import InputError, item_from
from webhook.policy.compiled import CompiledPolicy

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class Entry:
    """What convert did with one object: ``converted``, ``unchanged``, ``skipped`` (with ``reason``), ``not due``
    (``--stage due``: its cohort has not reached pilot or migrated, with ``reason``) or ``invalid`` (an input
    error: a quantity that is none, with the field and value in ``reason``)."""

    source: str
    object: str
    status: str
    form: str = ""
    notes: list[str] = field(default_factory=list)
    reason: str = ""
    generated: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v or k in ("source", "object", "status")}


@dataclass
class Settings:
    """The policy pinned at the target stage, the namespace for manifests naming none, and the form asked for."""

    policy: CompiledPolicy
    stage: str
    namespace: str | None
    claims: bool
    now: dt.datetime
    taken: set[str] = field(default_factory=set)
    """ResourceClaimTemplate names in the files of this run, existing and generated: a generated name never
    collides with another (two workloads of different kinds may share a name)."""
    due: CompiledPolicy | None = None
    """``--stage due``: the policy as it is (``policy`` is then unused); each object gets the stage its cohort is
    in on ``now`` (``plan.due_stage``), pinned, or is left as it is when that is legacy."""
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    """Labels of the Namespaces in the file being converted (``--stage due``)."""
    _pinned: dict[str, CompiledPolicy] = field(default_factory=dict)

    def for_object(self, namespace: str) -> tuple[Settings | None, str]:
        """The settings for an object of ``namespace``: these, or under ``--stage due`` those of the stage its
        cohort is in (None and why when it is not due)."""
        if self.due is None:
            return self, ""
        stage, why = due_stage(self.due, namespace, self.labels.get(namespace), self.now)
        if not stage:
            return None, why
        return replace(self, policy=self.pinned_at(stage), stage=stage, due=None), ""

    def pinned_at(self, stage: str) -> CompiledPolicy:
        """``due`` pinned at ``stage`` (made once per run)."""
        assert self.due is not None
        if stage not in self._pinned:
            self._pinned[stage] = pinned(self.due, stage)
        return self._pinned[stage]


@dataclass
class Converted:
    """A file's text before and after, and what happened to each object in it."""

    path: str
    before: str
    after: str
    entries: list[Entry]

    @property
    def changed(self) -> bool:
        return self.before != self.after


def convert_text(path: str, text: str, settings: Settings) -> Converted:
    """The converted text of a file (``text`` itself when nothing changes) and an entry per object."""
    try:
        docs = split(text)
    except NotConvertible as exc:
        return Converted(path, text, text, [Entry(path, "(whole file)", "skipped", reason=str(exc))])
    entries: list[Entry] = []
    candidates: dict[int, tuple[Entry, list[Document]]] = {}
    number = 0
    taken = settings.taken
    taken |= _template_names(docs)
    if settings.due is not None:
        settings.labels = _namespace_labels(docs)
    used: dict[int, Settings] = {}
    for i, doc in enumerate(docs):
        try:
            obj = doc.plain()
        except NotConvertible as exc:
            number += 1
            entries.append(Entry(f"{path}#{number}", "(document)", "skipped", reason=str(exc)))
            continue
        if obj is None:
            continue
        number += 1
        entry, new_docs, used[i] = _convert_doc(doc, obj, f"{path}#{number}", settings, taken)
        if entry is not None:
            entries.append(entry)
        if entry is not None and new_docs:
            candidates[i] = (entry, new_docs)
    if not candidates:
        return Converted(path, text, text, entries)
    _verify(docs, candidates, used, settings.namespace)
    if not candidates:
        return Converted(path, text, text, entries)
    out = [d for i, doc in enumerate(docs) for d in (candidates[i][1] if i in candidates else [doc])]
    return Converted(path, text, join(out), entries)


def _namespace_labels(docs: list[Document]) -> dict[str, dict[str, str]]:
    """Labels of the Namespaces among the file's documents, by name (``--stage due``: their cohorts)."""
    out: dict[str, dict[str, str]] = {}
    for doc in docs:
        try:
            obj = doc.plain()
        except NotConvertible:
            continue
        if isinstance(obj, dict) and obj.get("kind") == "Namespace" and obj.get("apiVersion") == "v1":
            meta = obj.get("metadata")
            meta = meta if isinstance(meta, dict) else {}
            labels = meta.get("labels")
            labels = labels if isinstance(labels, dict) else {}
            out[str(meta.get("name"))] = {str(k): str(v) for k, v in labels.items()}
    return out


def _template_names(docs: list[Document]) -> set[str]:
    """ResourceClaimTemplate names the file has already (generated names must not collide)."""
    names = set()
    for doc in docs:
        try:
            obj = doc.plain()
        except NotConvertible:
            continue
        if isinstance(obj, dict) and obj.get("kind") == "ResourceClaimTemplate":
            names.add(object_name(obj))
    return names


def _describe(obj: dict[str, Any], req: AdmissionRequest) -> str:
    ns = req.namespace
    return f"{req.kind} {ns + '/' if ns else ''}{object_name(obj) or '<unnamed>'}"


def _request(obj: Any, source: str, namespace: str | None) -> AdmissionRequest | None:
    if not isinstance(obj, dict) or obj.get("kind") == "AdmissionReview":
        return None
    try:
        return item_from(obj, source, namespace, "CREATE").request
    except InputError:
        return None


def _convert_doc(doc: Document, obj: Any, source: str, settings: Settings,
                 taken: set[str]) -> tuple[Entry | None, list[Document], Settings]:
    """The entry for one document, when it changes the documents that replace it, and the settings it was
    converted with (under ``--stage due``, its cohort's stage)."""
    req = _request(obj, source, settings.namespace)
    if req is None or not isinstance(obj, dict):
        return None, [], settings
    what = _describe(obj, req)
    mine, why = settings.for_object(req.namespace)
    if mine is None:  # said only of an object convert would change once due
        return (Entry(source, what, "not due", reason=why) if _would_change(req, obj, settings) else None), [], settings
    entry, new = _convert_object(doc, obj, req, source, what, mine, taken)
    return entry, new, mine


def _would_change(req: AdmissionRequest, obj: dict[str, Any], settings: Settings) -> bool:
    """Whether the object has something to convert (or a reason not to) in the migrated stage's form."""
    policy = settings.due
    if policy is None or bad_quantities(obj, req.kind, req.group, policy.template_finders):
        return False
    plan = _plan(req, obj, replace(settings, policy=settings.pinned_at("migrated"), stage="migrated", due=None))
    return plan is not None and bool(plan.edits or plan.reasons)


def _convert_object(doc: Document, obj: dict[str, Any], req: AdmissionRequest, source: str, what: str,
                    settings: Settings, taken: set[str]) -> tuple[Entry | None, list[Document]]:
    """``_convert_doc`` for an object, with the settings of its stage."""
    bad = bad_quantities(obj, req.kind, req.group, settings.policy.template_finders)
    if bad:
        return Entry(source, what, "invalid", reason="; ".join(str(b) for b in bad)), []
    if obj.get("kind") == "List" or (str(obj.get("kind", "")).endswith("List") and "items" in obj):
        return _list_entry(obj, source, what, settings), []
    plan = _plan(req, obj, settings)
    if plan is None:
        return _unknown(obj, source, what), []
    if plan.reasons:
        return Entry(source, what, "skipped", reason="; ".join(plan.reasons)), []
    if not plan.edits:
        return (Entry(source, what, "unchanged", notes=plan.notes) if plan.notes else None), []
    try:
        tree = Tree(doc.text)
        generated = _rewrite(tree, plan, obj, taken)
        text = keep_untouched(doc.text, tree.dump())
    except NotConvertible as exc:
        return Entry(source, what, "skipped", reason=str(exc)), []
    except Exception as exc:  # noqa: BLE001 - a document shape nobody foresaw: left as it is, never a traceback
        return Entry(source, what, "skipped", reason=f"could not rewrite it ({type(exc).__name__}: {exc})"), []
    forms = sorted({e.form for e in plan.edits})
    entry = Entry(source, what, "converted", form="+".join(forms), notes=plan.notes,
                  generated=[f"ResourceClaimTemplate {t['metadata']['name']}" for t in generated])
    new = [Document(doc.separator, text)]
    for t in generated:
        header = f"# generated by dra-webhook convert for {what}\n"
        new.append(Document("---\n", header + dump_new(t)))
    return entry, new


def _rewrite(tree: Tree, plan: Plan, obj: dict[str, Any], taken: set[str]) -> list[dict[str, Any]]:
    """Carry out the plan's edits on ``tree``; the ResourceClaimTemplates they need (in the object's namespace)."""
    generated = []
    for edit in plan.edits:
        name = template_name(object_name(obj), edit.ref.name, edit, taken) if edit.form == "claims" else ""
        template = apply(tree, edit, name)
        if template is not None:
            ns = (obj.get("metadata") or {}).get("namespace")
            if ns:
                template["metadata"]["namespace"] = ns
            generated.append(template)
    return generated


def _plan(req: AdmissionRequest, obj: dict[str, Any], settings: Settings) -> Plan | None:
    """The plan for an object of a kind with pod templates the webhook examines; None for any other kind."""
    from webhook.objects.pods import POD_KINDS
    from webhook.offline.views import examined

    policy = settings.policy
    if req.kind not in POD_KINDS and (req.group, req.kind) not in policy.workload_kinds:
        return None
    if not examined(req.group, req.kind, policy.workload_kinds):
        return None
    return plan_object(obj, req.kind, req.group, policy, settings.stage, settings.claims)


def _unknown(obj: dict[str, Any], source: str, what: str) -> Entry | None:
    """A kind the webhook does not examine: said only when it holds pod templates (a CRD the policy could name)."""
    from webhook.policy.delivery import has_pod_template

    if not has_pod_template(obj):
        return None
    return Entry(source, what, "skipped", reason="a kind the webhook does not examine: name it in the policy's "
                 "spec.workloadKinds (group, kind, podTemplates) and convert again")


def _list_entry(obj: dict[str, Any], source: str, what: str, settings: Settings) -> Entry | None:
    items = obj.get("items") if isinstance(obj.get("items"), list) else []
    for item in items or []:
        req = _request(item, source, settings.namespace)
        if req is not None and isinstance(item, dict) and bad_quantities(item, req.kind, req.group,
                                                                         settings.policy.template_finders):
            continue  # not rewritten anyway; check reports the field
        plan = _plan(req, item, settings) if req is not None and isinstance(item, dict) else None
        if plan is not None and (plan.edits or plan.reasons):
            return Entry(source, what, "skipped", reason="objects inside a List are not rewritten: split it into "
                         "documents (kubectl get -o yaml | yq '.items[]' -s ...) and convert those")
    return None


def _verify(docs: list[Document], candidates: dict[int, tuple[Entry, list[Document]]], used: dict[int, Settings],
            namespace: str | None) -> None:
    """Every rewritten object through the webhook (mutate, then validate) at its target stage (``used``: the
    settings each document was converted with), with the converted file as the cluster view; a rewrite it would
    deny is dropped from ``candidates`` and its entry says why."""
    from webhook.admission.answer import admit
    from webhook.offline.views import input_view

    out = [d for i, doc in enumerate(docs) for d in (candidates[i][1] if i in candidates else [doc])]
    requests = [r for r in (_request(d.plain(), "", namespace) for d in out) if r is not None]
    view = input_view(requests)
    for i, (entry, new_docs) in list(candidates.items()):
        settings = used[i]
        denials = []
        for doc in new_docs:
            req = _request(doc.plain(), "", settings.namespace)
            if req is None:
                denials.append("the rewritten document is not an object")
                continue
            admitted = admit(req, settings.policy, view, settings.now)
            if not admitted.allowed:
                denials.append(f"{req.kind} {req.name}: {admitted.message}")
        if denials:
            del candidates[i]
            entry.status, entry.form, entry.generated = "skipped", "", []
            entry.reason = "the converted object would be denied at the target stage: " + "; ".join(denials)
