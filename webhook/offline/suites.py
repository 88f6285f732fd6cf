"""Policy test suites: YAML files that say what the webhook must decide, checked through the real engine.

A platform team changes a policy in a pull request; the suites next to it say, per object, the expected
decision, the rules that fire (with their actions), warnings, and the patched fields. They run offline,
through ``admission.admit`` exactly as ``check`` and the server do, with a fixed clock (``at``) so a
schedule date passing does not turn a green suite red. Like ``kyverno test`` and ``gator verify``, but
with the webhook's own engine and policy files.

Format (``kind: MigrationPolicyTest``; paths are relative to the suite file)::

    apiVersion: dra-migration.io/v1alpha1
    kind: MigrationPolicyTest
    metadata: {name: pods}
    policy: ../default.yaml           # file or directory, as `serve --policy` takes it
    at: "2027-02-15"                  # UTC date or time the cases are judged at (default: now)
    namespace: ml-a                   # for manifests that name none (default: "default")
    operation: CREATE                 # for manifests (default CREATE)
    cluster:                          # optional: what the cluster view knows (absent: offline);
                                      # a case may have its own
      namespaces: {ml-a: {team: a}}   # namespace -> labels
      deviceClasses: [...]            # also pods, podGroups, resourceClaims, resourceClaimTemplates,
                                      # resourceSlices
    cases:
    - name: legacy name is refused once migrated
      resource: {...}                 # or resources: [...], files: [...] (manifests or AdmissionReviews)
      oldObject: {...}                # UPDATE of a manifest (default: the object itself)
      expect:
        allowed: false
        rules: {legacy-resource-name: Deny}   # exactly these rules report findings (strongest action)
        warnings: ["substring"]               # each found in some warning; [] = no warnings
        message: "substring of the denial message"
        patched: {/metadata/annotations/dra-migration.io~1stage: migrated}   # JSON pointer: value
        absent: [/spec/affinity]              # pointers the patched object must not have
        mutatedBy: [track-rollout]            # the patch differs with this rule switched Off
        unchanged: true                       # no patch at all
        idempotent: true                      # a second mutate pass over the patched object is empty

``rules`` also takes a list of ids (any action). A rule switched off by an exception reports ``Off``.
"""

from __future__ import annotations

import copy
import datetime as dt
import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import jsonpointer
import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from webhook.admission.answer import Admitted, admit, handle
from webhook.offline.inputs import parse_time, subject_of
from webhook.offline.views import Cluster, SuiteView
from webhook.policy.model import Action
from webhook.policy.rule_ids import RULE_IDS

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails  # pydantic's own dependency: its ValidationError.errors() items

API_VERSION = "dra-migration.io/v1alpha1"
KIND = "MigrationPolicyTest"
SUFFIXES = (".yaml", ".yml")
_ABSENT = object()


# ------------------------------------------------------------------------------------------------ model


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _known_rule(rule: str) -> str:
    if rule not in RULE_IDS:
        close = difflib.get_close_matches(rule, RULE_IDS, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else f"; known rules: {', '.join(RULE_IDS)}"
        raise ValueError(f"unknown rule {rule!r}{hint}")
    return rule


def _pointer(ptr: str) -> str:
    try:
        jsonpointer.JsonPointer(ptr)
    except jsonpointer.JsonPointerException as exc:
        raise ValueError(f"{ptr!r} is not a JSON pointer ({exc}); write e.g. /metadata/annotations/a~1b") from None
    return ptr


class Expect(_Strict):
    allowed: bool | None = Field(default=None, description="The decision after mutate and validate.")
    rules: dict[str, Action | None] | None = Field(
        default=None, description="Exactly the rules that report findings; value: their strongest action."
    )
    warnings: list[str] | None = Field(default=None, description="Substrings each found in some warning.")
    message: str | None = Field(default=None, description="Substring of the denial message.")
    patched: dict[str, Any] = Field(default_factory=dict, description="JSON pointer -> value in the patched object.")
    absent: list[str] = Field(default_factory=list, description="JSON pointers the patched object must not have.")
    mutatedBy: list[str] = Field(default_factory=list, description="Rules whose mutation shows in the patch.")
    unchanged: bool | None = Field(default=None, description="true: no patch at all; false: some patch.")
    idempotent: bool | None = Field(
        default=None, description="true: mutating the patched object again gives an empty patch."
    )

    @field_validator("rules", mode="before")
    @classmethod
    def _rules_list(cls, v: Any) -> Any:
        if isinstance(v, list) and all(isinstance(r, str) for r in v):
            return dict.fromkeys(v)
        return v

    @field_validator("rules")
    @classmethod
    def _rules_known(cls, v: dict[str, Action | None] | None) -> dict[str, Action | None] | None:
        for rule in v or {}:
            _known_rule(rule)
        return v

    @field_validator("mutatedBy")
    @classmethod
    def _mutators_known(cls, v: list[str]) -> list[str]:
        return [_known_rule(r) for r in v]

    @field_validator("patched")
    @classmethod
    def _patched(cls, v: dict[str, Any]) -> dict[str, Any]:
        for ptr in v:
            _pointer(ptr)
        return v

    @field_validator("absent")
    @classmethod
    def _absent(cls, v: list[str]) -> list[str]:
        return [_pointer(p) for p in v]


Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


def _valid_at(v: str | None) -> str | None:
    if v is not None:
        parse_time(v)  # raises ValueError with a message the suite error shows
    return v


AtTime = Annotated[str | None, AfterValidator(_valid_at)]

class Case(_Strict):
    name: str = Field(min_length=1)
    resource: dict[str, Any] | None = None
    resources: list[dict[str, Any]] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)
    oldObject: dict[str, Any] | None = None
    namespace: str | None = None
    operation: Operation | None = None
    at: AtTime = None
    cluster: Cluster | None = None
    expect: Expect


class SuiteMeta(_Strict):
    name: str = Field(min_length=1)


class SuiteModel(_Strict):
    apiVersion: Literal["dra-migration.io/v1alpha1"]
    kind: Literal["MigrationPolicyTest"]
    metadata: SuiteMeta
    policy: str = Field(min_length=1)
    at: AtTime = None
    namespace: str | None = None
    operation: Operation = "CREATE"
    cluster: Cluster | None = None
    cases: list[Case] = Field(min_length=1)


# ---------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Broken:
    """A suite that cannot run: the file, the line and what is wrong (exit 2)."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


@dataclass
class Result:
    suite: str  # suite file
    line: int  # line of the case
    case: str
    subject: str  # "Pod ml-a/train-0"
    source: str  # where the object came from
    passed: bool
    diff: list[str] = field(default_factory=list)
    covers: frozenset[str] = frozenset()  # rule ids this case's expectation shows firing


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)
    broken: list[Broken] = field(default_factory=list)
    suites: int = 0

    @property
    def failed(self) -> list[Result]:
        return [r for r in self.results if not r.passed]

    @property
    def covered(self) -> frozenset[str]:
        return frozenset(rule for r in self.results for rule in r.covers)


# ---------------------------------------------------------------------------------------------- finding


def is_suite_text(text: str) -> bool:
    """Cheap pre-check while scanning a directory: object files sit next to suites and are skipped."""
    return KIND in text


def find_suites(paths: Iterable[str | Path]) -> tuple[list[Path], list[Broken]]:
    """Suite files under the given files/directories (recursively, sorted); explicit files always count."""
    found: list[Path] = []
    broken: list[Broken] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            for f in sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file()):
                if any(part.startswith(".") for part in f.relative_to(path).parts):
                    continue
                try:
                    if is_suite_text(f.read_text(encoding="utf-8", errors="replace")):
                        found.append(f)
                except OSError as exc:
                    broken.append(Broken(str(f), 0, f"cannot read: {exc.strerror or exc}"))
        else:
            broken.append(Broken(str(path), 0, "no such file or directory"))
    return found, broken


# ------------------------------------------------------------------------------------------------ parse


def _model_fields(loc: tuple[Any, ...]) -> list[str]:
    """Keys allowed in the mapping at ``loc`` (for "did you mean")."""
    import typing

    from webhook.policy.loader import unwrap_optional

    tp: Any = SuiteModel
    for part in loc:
        tp = unwrap_optional(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if part not in tp.model_fields:
                return []
            tp = tp.model_fields[part].annotation
        elif typing.get_origin(tp) in (list, dict):
            tp = typing.get_args(tp)[-1]
        else:
            return []
    tp = unwrap_optional(tp)
    return list(tp.model_fields) if isinstance(tp, type) and issubclass(tp, BaseModel) else []


def _problem_of(err: ErrorDetails, doc: Any) -> Broken:
    from webhook.policy.loader import loc_path, refine_loc

    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p))  # union member tags
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        allowed = _model_fields(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else (f" (allowed keys: {', '.join(allowed)})"
                                                                if allowed else "")
        text = f"unknown key {str(loc[-1])!r}{hint}"
    elif kind == "missing":
        text = f"required key {str(loc[-1])!r} is missing"
    elif kind in ("value_error", "assertion_error"):
        text = msg.removeprefix("Value error, ")
        loc = refine_loc(loc, text, doc.data)
    elif kind == "literal_error" or kind == "enum":
        text = f"{err.get('input')!r}: {msg[:1].lower() + msg[1:]}"
    else:
        text = f"{msg[:1].lower() + msg[1:]}, got {err.get('input')!r}"
    path = loc_path(loc)
    return Broken(doc.file, doc.line_of(loc), f"{path}: {text}" if path else text)


@dataclass
class Suite:
    file: Path
    model: SuiteModel
    lines: Any  # loader.Document: line_of(loc)


def parse_suite(path: Path) -> tuple[Suite | None, list[Broken]]:
    """Read one suite; every problem has its file and line."""
    from webhook.policy.loader import parse_documents

    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, [Broken(name, 0, f"cannot read: {exc.strerror or exc}")]
    docs, problems = parse_documents(name, raw)
    broken = [Broken(p.file, p.line, f"{p.path}: {p.message}" if p.path else p.message) for p in problems]
    if broken:
        return None, broken
    if len(docs) != 1:
        return None, [Broken(name, docs[1].line if docs else 0,
                             f"a suite file holds exactly one {KIND} document, found {len(docs)}")]
    doc = docs[0]
    if not isinstance(doc.data, dict) or doc.data.get("kind") != KIND:
        return None, [Broken(name, doc.line, f"not a {KIND} (kind: {KIND}, apiVersion: {API_VERSION})")]
    try:
        model = SuiteModel.model_validate(doc.data)
    except ValidationError as exc:
        return None, [_problem_of(e, doc) for e in exc.errors(include_url=False)]
    return Suite(path, model, doc), []


# -------------------------------------------------------------------------------------------------- run


def _resolve(obj: Any, ptr: str) -> Any:
    return jsonpointer.resolve_pointer(obj, ptr, _ABSENT)


def _dump(value: Any) -> list[str]:
    text = yaml.safe_dump(value, sort_keys=False, default_flow_style=False, width=10_000, allow_unicode=True)
    return text.splitlines()


def _show(value: Any) -> Any:
    return "<absent>" if value is _ABSENT else value


@dataclass(frozen=True)
class _Seen:
    """What a case produced: the engine's result, which rules changed the patch, the second mutate pass."""

    actual: Admitted
    mutated_by: Mapping[str, bool]
    second_patch: list[dict[str, Any]] | None


Mismatch = tuple[Any, Any] | None  # (expected, actual) to show in the diff, or None when it holds


def _check_allowed(expect: Expect, seen: _Seen) -> Mismatch:
    if expect.allowed is None or expect.allowed == seen.actual.allowed:
        return None
    return expect.allowed, seen.actual.allowed


def _check_rules(expect: Expect, seen: _Seen) -> Mismatch:
    if expect.rules is None:
        return None
    have = seen.actual.strongest()
    actions_ok = all(a is None or have.get(r) == a for r, a in expect.rules.items())
    if set(expect.rules) == set(have) and actions_ok:
        return None
    want = {r: (a.value if a is not None else have[r].value if r in have else "any")
            for r, a in sorted(expect.rules.items())}
    return want, {r: a.value for r, a in sorted(have.items())}


def _check_warnings(expect: Expect, seen: _Seen) -> Mismatch:
    if expect.warnings is None:
        return None
    have = seen.actual.warnings
    missing = [w for w in expect.warnings if not any(w in h for h in have)]
    if not missing and (expect.warnings or not have):
        return None
    return list(expect.warnings), list(have)


def _check_message(expect: Expect, seen: _Seen) -> Mismatch:
    if expect.message is None or expect.message in seen.actual.message:
        return None
    return expect.message, seen.actual.message


def _check_patched(expect: Expect, seen: _Seen) -> Mismatch:
    patched = seen.actual.final
    bad = {p: v for p, v in expect.patched.items() if _resolve(patched, p) != v}
    return (bad, {p: _show(_resolve(patched, p)) for p in bad}) if bad else None


def _check_absent(expect: Expect, seen: _Seen) -> Mismatch:
    patched = seen.actual.final
    present = [p for p in expect.absent if _resolve(patched, p) is not _ABSENT]
    return (present, {p: _resolve(patched, p) for p in present}) if present else None


def _check_mutated_by(expect: Expect, seen: _Seen) -> Mismatch:
    if all(seen.mutated_by.get(r) for r in expect.mutatedBy):
        return None
    return list(expect.mutatedBy), [r for r in expect.mutatedBy if seen.mutated_by.get(r)]


def _check_unchanged(expect: Expect, seen: _Seen) -> Mismatch:
    patch = seen.actual.patch
    if expect.unchanged is None or expect.unchanged == (not patch):
        return None
    return expect.unchanged, {"unchanged": not patch, "patch": patch}


def _check_idempotent(expect: Expect, seen: _Seen) -> Mismatch:
    second = seen.second_patch
    if expect.idempotent is None or expect.idempotent == (not second):
        return None
    return expect.idempotent, {"idempotent": not second, "second patch": second}


# Every ``expect`` key with its check, in the order failures are shown.
_CHECKS: tuple[tuple[str, Callable[[Expect, _Seen], Mismatch]], ...] = (
    ("allowed", _check_allowed),
    ("rules", _check_rules),
    ("warnings", _check_warnings),
    ("message", _check_message),
    ("patched", _check_patched),
    ("absent", _check_absent),
    ("mutatedBy", _check_mutated_by),
    ("unchanged", _check_unchanged),
    ("idempotent", _check_idempotent),
)


def compare(
    expect: Expect, actual: Admitted, mutated_by: Mapping[str, bool], second_patch: list[dict[str, Any]] | None = None
) -> tuple[list[str], list[str]]:
    """(failed keys, unified diff lines of expected vs actual for those keys)."""
    seen = _Seen(actual, mutated_by, second_patch)
    exp: dict[str, Any] = {}
    got: dict[str, Any] = {}
    for key, check in _CHECKS:
        found = check(expect, seen)
        if found is not None:
            exp[key], got[key] = found
    if not exp:
        return [], []
    diff = list(difflib.unified_diff(_dump(exp), _dump(got), "expected", "actual", lineterm="", n=3))
    return list(exp), diff


class _Runner:
    def __init__(self) -> None:
        self.policies: dict[Path, Any] = {}
        self.policy_errors: dict[Path, list[Broken]] = {}

    def policy(self, suite: Suite) -> tuple[Any, list[Broken]]:
        from webhook.policy.loader import PolicyError, load

        path = (suite.file.parent / suite.model.policy).resolve()
        if path not in self.policies and path not in self.policy_errors:
            try:
                self.policies[path] = load(path)
            except PolicyError as exc:
                self.policy_errors[path] = [Broken(p.file, p.line, f"{p.path}: {p.message}" if p.path else p.message)
                                            for p in exc.problems]
        if path in self.policy_errors:
            line = suite.lines.line_of(("policy",))
            head = Broken(str(suite.file), line, f"policy {suite.model.policy} cannot be loaded:")
            return None, [head, *self.policy_errors[path]]
        return self.policies[path], []

    def run(self, suite: Suite, report: Report) -> None:
        from webhook.offline.inputs import InputError

        policy, broken = self.policy(suite)
        if broken:
            report.broken += broken
            return
        m = suite.model
        view = SuiteView(m.cluster) if m.cluster is not None else None
        planned: list[tuple[int, Case, list[Any], dt.datetime, Any]] = []
        broken_before = len(report.broken)
        for i, case in enumerate(m.cases):
            line = suite.lines.line_of(("cases", i))
            operation = case.operation or m.operation
            namespace = case.namespace or m.namespace
            at = case.at or m.at
            now = parse_time(at) if at else dt.datetime.now(dt.UTC)
            try:
                items = case_items(suite, i, case, namespace, operation)
            except InputError as exc:
                report.broken.append(Broken(str(suite.file), line, f"cases[{i}] ({case.name}): {exc}"))
                continue
            except _CaseError as exc:
                report.broken.append(Broken(str(suite.file), exc.line, f"cases[{i}] ({case.name}): {exc.message}"))
                continue
            if not items:
                report.broken.append(Broken(str(suite.file), line, f"cases[{i}] ({case.name}): no objects to "
                                            "test: give resource, resources or files"))
                continue
            if case.oldObject is not None:
                for item in items:
                    item.request.old_object = case.oldObject
            planned.append((line, case, items, now, SuiteView(case.cluster) if case.cluster else view))
        if len(report.broken) > broken_before:
            return  # a suite runs whole or not at all
        for line, case, items, now, case_view in planned:
            for item in items:
                report.results.append(self._one(suite, line, case, item, policy, case_view, now))

    def _one(self, suite: Suite, line: int, case: Case, item: Any, policy: Any, view: Any,
             now: dt.datetime) -> Result:
        req = item.request
        actual = admit(req, policy, view, now)
        mutated_by = {}
        for rule in case.expect.mutatedBy:
            alone = handle(req, "mutate", policy.without_rule(rule), view, now).mutated
            mutated_by[rule] = (alone or None) != actual.mutated
        second = None
        if case.expect.idempotent is not None and actual.patch:
            again = copy.copy(req)
            again.object = actual.final
            second = handle(again, "mutate", policy, view, now).patch
        failed, diff = compare(case.expect, actual, mutated_by, second)
        covers = frozenset(
            {r for r, a in (case.expect.rules or {}).items() if a is not Action.Off}
            | set(case.expect.mutatedBy)
        )
        return Result(str(suite.file), line, case.name, subject_of(req), item.source, not failed, diff,
                      covers if not failed else frozenset())


def case_items(suite: Suite, i: int, case: Case, namespace: str | None, operation: str) -> list[Any]:
    """The requests of case ``i``: its inline resources, then its files. Raises InputError or _CaseError."""
    from webhook.offline.inputs import InputError, item_from, read_items

    items = []
    inline = ([case.resource] if case.resource is not None else []) + list(case.resources)
    for j, obj in enumerate(inline):
        loc = ("cases", i, "resource") if case.resource is not None and j == 0 else (
            "cases", i, "resources", j - (case.resource is not None))
        where = f"{suite.file}:{suite.lines.line_of(loc)}"
        try:
            items.append(item_from(obj, where, namespace, operation))
        except InputError as exc:
            raise _CaseError(suite.lines.line_of(loc), str(exc).removeprefix(where + ": ")) from None
    for k, rel in enumerate(case.files):
        target = suite.file.parent / rel
        if not target.is_file():
            raise _CaseError(suite.lines.line_of(("cases", i, "files", k)), f"file {rel} not found "
                             f"(paths are relative to the suite: {target})")
        items += read_items(str(target), namespace, operation)
    return items


class _CaseError(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def run_suites(paths: Iterable[str | Path]) -> Report:
    """Find, parse and run every suite under ``paths``."""
    files, broken = find_suites(paths)
    report = Report(broken=list(broken))
    if not files and not broken:
        report.broken.append(Broken(", ".join(str(p) for p in paths), 0, f"no {KIND} suites found"))
    runner = _Runner()
    for file in files:
        suite, problems = parse_suite(file)
        report.suites += 1
        if problems:
            report.broken += problems
            continue
        assert suite is not None
        runner.run(suite, report)
    return report
