"""The API server's own name rules, for every string the webhook writes into an object.

A patch the API server rejects (422) is worse than no patch: a template-generated claim that fails
validation leaves its Pod Pending for ever. So whatever the policy lets the webhook write (toleration
keys and values, node-pool labels, annotation keys) is checked at policy load with these functions,
which follow kubernetes/kubernetes ``staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go``
(``IsDNS1123Subdomain``; ``IsQualifiedName`` and ``IsValidLabelValue``, now aliases of
``pkg/api/validate/content`` ``IsLabelKey``/``IsLabelValue``), read at master for 1.37. Each returns
the problems as text, empty when the value is valid.
"""

from __future__ import annotations

import re

DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
# apimachinery/pkg/api/validation/objectmeta.go ValidateAnnotations: TotalAnnotationSizeLimitB, the sum of
# len(key) + len(value) over all annotations of one object.
TOTAL_ANNOTATION_SIZE = 256 * 1024

_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def dns1123_subdomain(value: str) -> list[str]:
    """``IsDNS1123Subdomain``: lower-case RFC 1123 labels joined by dots, at most 253 characters."""
    errs = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        errs.append("must be a lowercase RFC 1123 subdomain (lower case alphanumeric characters, '-' or '.', "
                    "starting and ending with an alphanumeric character, e.g. example.com)")
    return errs


def qualified_name(value: str) -> list[str]:
    """``IsQualifiedName``: ``[prefix/]name``, prefix a DNS subdomain, name at most 63 characters."""
    parts = value.split("/")
    if len(parts) > 2:
        return ["must be a name with an optional DNS subdomain prefix and one '/' (e.g. example.com/MyName)"]
    errs = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        errs += ["prefix part must be non-empty"] if not prefix else [f"prefix part {e}" for e in
                                                                      dns1123_subdomain(prefix)]
    if not name:
        return [*errs, "name part must be non-empty"]
    if len(name) > QUALIFIED_NAME_MAX:
        errs.append(f"name part must be no more than {QUALIFIED_NAME_MAX} characters")
    if not _QUALIFIED.match(name):
        errs.append("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                    "with an alphanumeric character (e.g. MyName, my.name, 123-abc)")
    return errs


def label_value(value: str) -> list[str]:
    """``IsValidLabelValue``: empty, or at most 63 alphanumerics, '-', '_', '.' starting and ending alphanumeric."""
    errs = []
    if len(value) > LABEL_VALUE_MAX:
        errs.append(f"must be no more than {LABEL_VALUE_MAX} characters")
    if not _LABEL_VALUE.match(value):
        errs.append("must be empty or consist of alphanumeric characters, '-', '_' or '.', and must start and "
                    "end with an alphanumeric character (e.g. MyValue, my_value, 12345)")
    return errs


def require(what: str, value: str, errors: list[str]) -> str:
    """``value`` if ``errors`` is empty, else ValueError ``<what> 'value' is not valid: ...``.

    The quoted value comes first so the policy loader can point at that entry's own line.
    """
    if errors:
        raise ValueError(f"{what} {value!r} is not valid: {'; '.join(errors)}")
    return value
