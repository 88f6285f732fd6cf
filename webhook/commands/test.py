"""`dra-webhook test [DIR...]`: run policy test suites (``kind: MigrationPolicyTest``), offline.

Prints one row per tested object, then for each failure the expected and actual values as a diff, then
which rules the suites cover. Exit 0: all passed; 1: a case failed; 2: a suite is broken (file:line).
The format is documented in ``webhook/offline/suites.py`` and shown by ``--help``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from webhook.commands import EXIT_INPUT, EXIT_NO, EXIT_OK, Subparsers
from webhook.policy.rule_ids import RULE_IDS

if TYPE_CHECKING:
    from webhook.offline.suites import Report, Result

EPILOG = """\
suite format (YAML, one MigrationPolicyTest per file; paths relative to the suite file):

  apiVersion: dra-migration.io/v1alpha1
  kind: MigrationPolicyTest
  metadata: {name: pods}
  policy: ../default.yaml            # policy file or directory
  at: "2027-02-15"                   # clock for the cases (UTC date/time; default now)
  namespace: ml-a                    # for manifests without one (default "default")
  operation: CREATE                  # for manifests (default CREATE)
  cluster:                           # optional cluster view: namespaces (name -> labels),
    namespaces: {ml-a: {team: a}}    #   deviceClasses, pods, podGroups, resourceClaims,
                                     #   resourceClaimTemplates; absent = offline
  cases:
  - name: legacy name refused once migrated
    resource: {apiVersion: v1, kind: Pod, ...}   # or resources: [...] / files: [x.yaml]
    expect:                                     # (manifests or AdmissionReviews)
      allowed: false
      rules: {legacy-resource-name: Deny}       # exactly these rules fire (or a list of ids)
      warnings: ["substring"]                   # [] = no warnings
      message: "substring of the denial"
      patched: {/metadata/annotations/dra-migration.io~1stage: migrated}
      absent: [/spec/affinity]
      mutatedBy: [track-rollout]                # the patch changes with the rule Off
      unchanged: true                           # no patch
      idempotent: true                          # mutating the result again: empty patch

A case may set its own namespace, operation, at and cluster; oldObject gives the old object of an UPDATE.

exit status: 0 all cases pass, 1 a case fails, 2 a suite is broken
"""


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "test",
        help="run policy test suites (exit 1 on a failure, 2 on a broken suite)",
        description="Run MigrationPolicyTest suites found in the given files and directories (recursively)\n"
        "through the webhook's engine, offline: mutate, then validate the patched object, at the suite's\n"
        "fixed date. Prints a pass/fail table, a diff of expected vs actual for each failure, and how many\n"
        "rule ids the suites show firing.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dirs", nargs="*", default=["policies/tests"], metavar="DIR",
                   help="suite files or directories (default: policies/tests)")
    p.add_argument("--require-all-rules", action="store_true",
                   help="also fail (exit 1) unless every rule id is shown firing by some passing expectation")
    p.add_argument("-q", "--quiet", action="store_true", help="print only failures and the summary")


def run(args: argparse.Namespace) -> int:
    from webhook.offline.suites import run_suites

    report = run_suites(args.dirs)
    _print_table([r for r in report.results if not (args.quiet and r.passed)])
    _print_problems(report)
    missing = [rule for rule in RULE_IDS if rule not in report.covered]
    print(_summary(report, missing))
    if missing and args.require_all_rules:
        print(f"rules no passing expectation shows firing: {', '.join(missing)}")
    if report.broken:
        return EXIT_INPUT
    return EXIT_NO if report.failed or (args.require_all_rules and missing) else EXIT_OK


def _print_table(rows: list[Result]) -> None:
    """One line per case: result, suite:line, the case (clipped to 60 columns) and the object."""
    if not rows:
        return
    width_case = min(60, max(len(r.case) for r in rows))
    width_where = max(len(f"{r.suite}:{r.line}") for r in rows)
    print(f"{'RESULT':<6}  {'SUITE':<{width_where}}  {'CASE':<{width_case}}  OBJECT")
    for r in rows:
        case = r.case if len(r.case) <= width_case else r.case[: width_case - 1] + "…"
        print(f"{'PASS' if r.passed else 'FAIL':<6}  {r.suite + ':' + str(r.line):<{width_where}}  "
              f"{case:<{width_case}}  {r.subject}")


def _print_problems(report: Report) -> None:
    """Each failure with its diff, then the broken suites."""
    for r in report.failed:
        print(f"\nFAIL {r.suite}:{r.line}: {r.case}: {r.subject} ({r.source})")
        for line in r.diff:
            print(f"    {line}")
    if report.broken:
        print("\nBROKEN suites (fix these first):")
        for b in report.broken:
            print(f"  {b}")


def _summary(report: Report, missing: list[str]) -> str:
    passed = len(report.results) - len(report.failed)
    return (f"\n{passed} passed, {len(report.failed)} failed"
            f"{f', {len(report.broken)} problem(s) in broken suites' if report.broken else ''}"
            f" ({report.suites} suite{'s' if report.suites != 1 else ''}); "
            f"rules covered: {len(RULE_IDS) - len(missing)}/{len(RULE_IDS)}")
