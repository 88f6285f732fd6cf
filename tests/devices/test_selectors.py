"""Device selectors as kube-scheduler evaluates them (issue 25 item 2).

The first table is kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/cel/compile_test.go
(commit 052bb7dc, ``testcases``): the case name, its expression and device, and upstream's answer beside it
(``expectMatch`` True/False; ``expectMatchError`` -> None here, "unknown", because the scheduler fails the
allocation rather than skipping the device). The second evaluates the selectors of public drivers against
sample devices of several drivers in one cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from webhook.devices import selectors as cd
from webhook.devices.cel_library import rewrite_lookups

D = "dra.example.com"


def _eval(expression: str, attributes: dict[str, Any], driver: str = D,
          capacity: dict[str, Any] | None = None) -> bool | None:
    dev = {"name": "d", "attributes": attributes, "capacity": capacity or {}}
    sl = {"spec": {"driver": driver, "nodeName": "n", "devices": [dev]}}
    selector = cd.compile_selector(expression)
    assert selector.error is None, selector.error
    return cd.evaluate(selector, cd.slice_devices(sl)[0])


# (compile_test.go case name, expression, attributes (unqualified: the driver's domain), upstream result)
UPSTREAM = [
    ("runtime-error-lookup-identifier",
     'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))', {}, None),
    ("runtime-error-lookup-map",
     'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))', {}, None),
    ("domain-check-negative", '"no-such-domain" in device.attributes', {}, False),
    ("domain-check-positive", '"dra.example.com" in device.attributes',
     {"dra.example.com/something": {"bool": True}}, True),
    ("driver-name-qualifier", 'device.attributes["dra.example.com"].name', {"name": {"bool": True}}, True),
    ("driver-name-qualifier-map-lookup", 'device.attributes["dra.example.com"]["name"]',
     {"name": {"bool": True}}, True),
    ("bind", 'cel.bind(dra, device.attributes["dra.example.com"], dra.name)', {"name": {"bool": True}}, True),
    ("qualified-attribute-name", 'device.attributes["other.example.com"].name',
     {"other.example.com/name": {"bool": True}}, True),
    ("int", 'device.attributes["dra.example.com"].name > 0', {"name": {"int": 1}}, True),
    ("macro-exists-on-int", 'device.attributes["dra.example.com"].name.exists(x, x > 0)', {"name": {"int": 1}}, None),
    ("list-result-type-causes-match-error", 'device.attributes["dra.example.com"].names',
     {"names": {"strings": ["fish", "bird"]}}, None),
    ("includes-function-can-evaluate", 'device.attributes["dra.example.com"].name.includes("fish")',
     {"name": {"strings": ["fish", "bird"]}}, True),
    ("list-of-bool", 'device.attributes["dra.example.com"].names.size() == 2',
     {"names": {"bools": [True, False]}}, True),
    ("list-of-int", 'device.attributes["dra.example.com"].names.size() == 2', {"names": {"ints": [1, 2]}}, True),
    ("list-of-semver", 'device.attributes["dra.example.com"].names.size() == 2',
     {"names": {"versions": ["1.0.0", "2.0.0"]}}, True),
    ("macro-on-list-of-int", 'device.attributes["dra.example.com"].names.exists(x, x > 0)',
     {"names": {"ints": [1, 2]}}, True),
    ("macro-on-list-of-string", 'device.attributes["dra.example.com"].names.all(x, x != "")',
     {"names": {"strings": ["fish", "bird"]}}, True),
    ("macro-on-list-of-semver", 'device.attributes["dra.example.com"].names.all(x, x.isGreaterThan(semver("0.0.1")))',
     {"names": {"versions": ["1.0.0", "2.0.0"]}}, True),
    ("includes-function-on-bool-scalar-positive", 'device.attributes["dra.example.com"].name.includes(true)',
     {"name": {"bool": True}}, True),
    ("includes-function-on-bool-scalar-negative", 'device.attributes["dra.example.com"].name.includes(true)',
     {"name": {"bool": False}}, False),
    ("includes-function-on-bool-list-negative", 'device.attributes["dra.example.com"].name.includes(false)',
     {"name": {"bools": [True, True]}}, False),
    ("includes-function-on-int-scalar-negative", 'device.attributes["dra.example.com"].name.includes(1)',
     {"name": {"int": 2}}, False),
    ("includes-function-on-int-list-positive", 'device.attributes["dra.example.com"].name.includes(1)',
     {"name": {"ints": [1, 2]}}, True),
    ("includes-function-on-string-scalar-negative", 'device.attributes["dra.example.com"].name.includes("bird")',
     {"name": {"string": "fish"}}, False),
]


@pytest.mark.parametrize(("case", "expression", "attributes", "upstream"), UPSTREAM, ids=[u[0] for u in UPSTREAM])
def test_upstream_compile_test_cases(case: str, expression: str, attributes: dict[str, Any],
                                     upstream: bool | None) -> None:
    assert _eval(expression, attributes) is upstream, case


# Beyond compile_test.go: CEL semantics of the map-with-default (mapper.Find vs Contains) and the libraries
# of the base environment; the upstream answer is what cel-go gives for the scheduler's ``device`` value.
SEMANTICS = [
    # The case: `in` sees the real map, so a domain no device has is absent.
    ("!('other.example.com' in device.attributes)", {"x": {"int": 1}}, True),
    ("size(device.attributes) == 1", {"x": {"int": 1}}, True),
    ("device.attributes.all(d, d == 'dra.example.com')", {"x": {"int": 1}}, True),
    # Lookups get an empty map: has()/in on it are false, a field of it is an error.
    ("!('model' in device.attributes['gpu.nvidia.com'])", {}, True),
    ("has(device.attributes['gpu.nvidia.com'].model)", {}, False),
    ("size(device.attributes['gpu.nvidia.com']) == 0", {}, True),
    ("device.attributes['gpu.nvidia.com'].model == 'x'", {}, None),
    # A string that merely looks like a domain is not one.
    ("'gpu.nvidia.com' in device.attributes || device.attributes['dra.example.com'].x == 1", {"x": {"int": 1}},
     True),
    # Optional types.
    ("device.attributes[?'x.example.com'].?model.orValue('none') == 'none'", {}, True),
    ("device.attributes['dra.example.com'].?x.hasValue()", {"x": {"int": 1}}, True),
    ("optional.of(1).value() == 1", {}, True),
    # Kubernetes list library, sets, regex, format.
    ("device.attributes['dra.example.com'].n.isSorted() && device.attributes['dra.example.com'].n.sum() == 6",
     {"n": {"ints": [1, 2, 3]}}, True),
    ("device.attributes['dra.example.com'].n.min() == 1 && device.attributes['dra.example.com'].n.max() == 3",
     {"n": {"ints": [3, 1, 2]}}, True),
    ("device.attributes['dra.example.com'].v.max() == semver('10.0.0')", {"v": {"versions": ["9.0.0", "10.0.0"]}},
     True),
    ("sets.contains(device.attributes['dra.example.com'].n, [1, 2])", {"n": {"ints": [1, 2, 3]}}, True),
    ("sets.intersects(device.attributes['dra.example.com'].n, [7])", {"n": {"ints": [1, 2, 3]}}, False),
    ("device.attributes['dra.example.com'].s.find('[0-9]+') == '42'", {"s": {"string": "gpu42x"}}, True),
    ("device.attributes['dra.example.com'].s.findAll('[0-9]') == ['4', '2']", {"s": {"string": "gpu42x"}}, True),
    ("'%s-%d'.format(['a', 1]) == 'a-1'", {}, True),
    # Two-variable comprehensions (cel-go ext.TwoVarComprehensions).
    ("[5, 6].all(i, v, v > i) && !([1, 2].all(i, v, v > 1))", {}, True),
    ("device.attributes['dra.example.com'].n.exists(i, v, i == 2 && v == 7)", {"n": {"ints": [5, 6, 7]}}, True),
    ("device.attributes['dra.example.com'].n.existsOne(i, v, v > 5)", {"n": {"ints": [5, 6, 7]}}, False),
    ("device.attributes['dra.example.com'].n.transformList(i, v, i > 0, v * i) == [6, 14]",
     {"n": {"ints": [5, 6, 7]}}, True),
    ("device.attributes.all(domain, attrs, domain == 'dra.example.com' && size(attrs) == 1)",
     {"n": {"ints": [5]}}, True),
    ("[[1, 2], [3]].all(i, l, l.all(j, x, x > i))", {}, True),
    # IP and CIDR libraries (k8s.io/apiserver/pkg/cel/library/ip.go, cidr.go), e.g. a dranet interface address.
    ("cidr('10.0.0.0/8').containsIP(device.attributes['dra.example.com'].ip)", {"ip": {"string": "10.1.2.3"}}, True),
    ("cidr('10.0.0.0/8').containsIP(ip('11.0.0.1'))", {}, False),
    ("isIP('::ffff:1.2.3.4') || isIP('fe80::1%eth0')", {}, False),  # IPv4-mapped and zones are refused
    ("cidr('10.0.0.1/8').masked() == cidr('10.0.0.0/8') && cidr('10.0.0.1/8').ip() == ip('10.0.0.1')", {}, True),
    ("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16') && cidr('10.0.0.0/8').prefixLength() == 8", {}, True),
    ("ip('192.168.0.1').isGlobalUnicast() && !ip('169.254.0.1').isGlobalUnicast()", {}, True),
    ("ip('ff02::1').isLinkLocalMulticast() && ip('::1').family() == 6", {}, True),
    ("isCIDR('10.0.0.0/255.0.0.0')", {}, False),
]


@pytest.mark.parametrize(("expression", "attributes", "upstream"), SEMANTICS)
def test_map_with_default_and_libraries(expression: str, attributes: dict[str, Any], upstream: bool | None) -> None:
    assert _eval(expression, attributes) is upstream


@pytest.mark.parametrize("expression", [
    "{'a': 1}.transformMap(k, v, v + 1) == {'a': 2}",  # two-variable transformMap (ext.TwoVarComprehensions)
    "string(ip('10.0.0.1')) == '10.0.0.1'",  # the IP library's string() conversion
    "url('https://example.com').getHost() == 'example.com'",  # Kubernetes URL library
])
def test_what_the_runtime_lacks_is_a_compile_error_so_unknown(expression: str) -> None:
    selector = cd.compile_selector(expression)
    assert selector.program is None and selector.error
    assert cd.evaluate(selector, cd.slice_devices({"spec": {"driver": D, "devices": [{"name": "d"}]}})[0]) is None


def test_rewrite_leaves_strings_and_comments_alone() -> None:
    text = "'device.attributes[\"x\"]' == \"a]\" // device.attributes['y']\n"
    assert rewrite_lookups(text) == text
    assert rewrite_lookups("device.attributes[device.attributes['a'].k]") == (
        "(((('a') in device.attributes ? device.attributes['a'] : {}).k) in device.attributes ? "
        "device.attributes[(('a') in device.attributes ? device.attributes['a'] : {}).k] : {})")


# -- public drivers' selectors against a mixed fleet --------------------------------------------------------

NVIDIA_GPU_CLASS = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
# NVIDIA/k8s-dra-driver-gpu demo/specs/extended-resources/mig-1g-12gb.yaml (tests/data/upstream).
NVIDIA_MIG_CLASS = ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig' && "
                    "device.attributes['gpu.nvidia.com'].profile == '1g.12gb'")
# kubernetes-sigs/dra-example-driver: the class of tests/data/upstream/dra-example-extended-resource.yaml and
# demo/examples/cel-selector/cel-selector.yaml's claim selectors.
EXAMPLE_CLASS = "device.driver == 'gpu.example.com'"
EXAMPLE_CLAIM = ("device.attributes['gpu.example.com'].model == 'LATEST-GPU-MODEL' && "
                 "device.capacity['gpu.example.com'].memory.compareTo(quantity('40Gi')) >= 0")
# kubernetes-sigs/dra-driver-cpu: resource.kubernetes.io/pcieRoot as a string list (its README, "Exposing PCIe
# roots", DRAListTypeAttributes); a claim asking for one root.
CPU_CLASS = "device.driver == 'dra.cpu'"
CPU_PCIE = "device.attributes['resource.kubernetes.io'].pcieRoot.includes('pci0000:00')"
# A claim that excludes devices carrying another vendor's domain (the example shape).
NOT_NVIDIA = "!('gpu.nvidia.com' in device.attributes)"

FLEET = [
    ("gpu.nvidia.com", {"type": {"string": "gpu"}, "productName": {"string": "NVIDIA A100"}}, {}),
    ("gpu.nvidia.com", {"type": {"string": "mig"}, "profile": {"string": "1g.12gb"}}, {}),
    ("gpu.example.com", {"model": {"string": "LATEST-GPU-MODEL"}}, {"memory": {"value": "80Gi"}}),
    ("dra.cpu", {"resource.kubernetes.io/pcieRoot": {"strings": ["pci0000:00", "pci0000:40"]}}, {}),
    ("dra.net", {"ifName": {"string": "eth1"}}, {}),
]


@pytest.mark.parametrize(("expression", "answers"), [
    (NVIDIA_GPU_CLASS, [True, False, False, False, False]),
    (NVIDIA_MIG_CLASS, [False, True, False, False, False]),
    (EXAMPLE_CLASS, [False, False, True, False, False]),
    (EXAMPLE_CLAIM, [None, None, True, None, None]),  # a lookup of a missing attribute: the scheduler errors too
    (CPU_CLASS + " && " + CPU_PCIE, [False, False, False, True, False]),
    (NOT_NVIDIA, [False, False, True, True, True]),
])
def test_public_driver_selectors_on_a_mixed_fleet(expression: str, answers: list[bool | None]) -> None:
    got = [_eval(expression, attrs, driver, capacity) for driver, attrs, capacity in FLEET]
    assert got == answers
