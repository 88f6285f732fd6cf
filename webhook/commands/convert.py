"""`dra-webhook convert`: rewrite device-plugin manifests into the DRA form the policy prescribes, in git.

As long as manifests ask for the device plugin's names, every new workload depends on the webhook's rewrite and a
GitOps controller shows the webhook's patches as drift. ``convert`` makes the change at the source: per pod template
the target stage's form (``webhook/convert/plan.py``), written so that everything else in the file stays as it
was (``webhook/convert/documents.py``), and checked through the webhook's own admission path before it is written
(``webhook/convert/file.py``). Like a code formatter: a unified diff by default, ``-w`` writes the files,
``--check`` fails when something would change (CI).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from webhook.commands import EXIT_INPUT, EXIT_NO, EXIT_OK, CliError, Subparsers, at_or_now, load_policy
from webhook.convert.plan import DUE, STAGES, pinned
from webhook.offline.inputs import NAMESPACED_DEFAULT, expand_paths, quoted, write_target
from webhook.policy.defaults import default_policy

if TYPE_CHECKING:
    from webhook.convert.file import Converted, Entry

YAML = (".yaml", ".yml")

DESCRIPTION = """\
Rewrite the GPU requests of Kubernetes manifests (files, directories with -R, '-' for stdin; multi-document
YAML) into the DRA form the policy prescribes for the object's cohort at the target stage (--stage, default
migrated), so the manifests in git no longer depend on the webhook's rewrite.

--stage due converts only objects whose namespace's cohort has reached pilot or migrated on --at (default
today), each to its cohort's stage; the others are left as they are ("not due", with the cohort, its stage and
its next change), so `convert --check --stage due` is a CI gate that passes for teams not due yet. A namespace
a cohort's label selector may select is "stage unknown" and left as it is unless its Namespace (with labels)
is in the same file.

Per pod template of every kind the webhook examines (Pods, Deployments, Jobs, JobSets, training jobs, ... and
the policy's spec.workloadKinds):
  - a training job (spec.trainingJobs), or any template with --claims: explicit claims. The device names
    leave resources.requests/limits, the containers get resources.claims and the pod spec
    spec.resourceClaims, and a ResourceClaimTemplate (one request per container, with the policy's
    trainingJobs.deviceTolerations for a training job) is written as a new document after the workload;
  - a device plugin name (legacyNames): renamed to the policy resource's name, which DRA serves as an
    extended resource;
  - the policy resource's own name, served through DRA at that stage: stays as it is (said on stderr).
Comments, key order, quoting and formatting of everything else are kept; documents that do not change are
written back byte for byte. Every rewritten object is run through the webhook's engine (mutate, then validate)
at the target stage before it is written: a rewrite the webhook would deny is not made.

With -w a file is written in place; through a symbolic link only when the link was named on the command line
or resolves to a file inside the paths given (a link in a directory that points elsewhere is skipped, with the
reason), and a file two links name is written once.

Left untouched, with the reason on stderr (and in -o json): templates (Helm '{{ }}'), kinds the webhook does
not examine that hold pod templates, names no policy resource maps (HAMi's nvidia.com/gpumem, retired names),
Pods of a scheduler that does not allocate DRA devices, objects a workload controls, JSON files.

Exit codes: 0 done (nothing to change with --check); 1 with --check, something would change; 2 input or policy
error (also a resource quantity the API server would not decode, such as an unrendered $GPU_PER_NODE or an
empty string: the file, document, field and value are named, and the object is not converted)."""


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("convert", help="rewrite manifests into the policy's DRA form (diff, -w, --check)",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*", metavar="FILE", help="manifest files or directories ('-' = stdin)")
    p.add_argument("-f", "--filename", action="append", default=[], metavar="FILE", help="like FILE; repeatable")
    p.add_argument("-R", "--recursive", action="store_true", help="descend into directories given as FILE")
    p.add_argument("--policy", type=Path, default=None, help="policy file or directory (default: bundled)")
    p.add_argument("--namespace", "-n", default=None,
                   help=f"namespace of manifests that name none, for the cohort (default: {NAMESPACED_DEFAULT})")
    p.add_argument("--stage", choices=[*STAGES, DUE], default="migrated",
                   help="the stage whose form to write, for every cohort (default: migrated); due: for each "
                   "object the stage its namespace's cohort is in on --at, only when that is pilot or migrated "
                   "(objects of teams not due are left as they are, said on stderr as 'not due')")
    p.add_argument("--claims", action="store_true",
                   help="explicit claims for every template, also where the policy's path is the extended "
                   "resource served through DRA")
    p.add_argument("--at", default=None, metavar="DATE",
                   help="judge exceptions, and with --stage due each cohort's stage, as of this UTC date "
                   "(YYYY-MM-DD[THH:MM:SS]; default now)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("-w", "--write", action="store_true", help="write the files in place ('-': to stdout)")
    mode.add_argument("--check", action="store_true", help="print nothing but the reasons; exit 1 if a file "
                      "would change")
    p.add_argument("-o", "--output", choices=["diff", "json"], default="diff",
                   help="diff (default) or json: per object what was done and why, and the new text per file")


def run(args: argparse.Namespace) -> int:
    from webhook.convert.file import Converted, Entry, Settings, convert_text  # ruamel.yaml: only when converting

    policy = load_policy(args.policy or default_policy())
    paths = [*args.files, *args.filename]
    if not paths:
        raise CliError("input error: no input: give FILE arguments or -f FILE ('-' for stdin)")
    now = at_or_now(args.at)
    errors: list[str] = []
    # JSON manifests are left out of directories: convert writes YAML.
    files = expand_paths(paths, args.recursive, errors, YAML)
    if args.stage == DUE:
        settings = Settings(policy, DUE, args.namespace, args.claims, now, due=policy)
    else:
        settings = Settings(pinned(policy, args.stage), args.stage, args.namespace, args.claims, now)
    results = []
    for path in files:
        if Path(path).suffix == ".json":
            results.append(Converted(path, "", "", [Entry(path, "(whole file)", "skipped", reason="a JSON manifest: "
                                                          "convert rewrites YAML (turn it into YAML first)")]))
            continue
        text = _read(path, errors)
        if text is not None:
            results.append(convert_text(path, text, settings))
    for err in errors:
        print(f"input error: {err}", file=sys.stderr)
    _report(results, args)
    if args.write:
        _write(results, [p for p in paths if p != "-"])
    if errors or any(e.status == "invalid" for r in results for e in r.entries):
        return EXIT_INPUT
    return EXIT_NO if args.check and any(r.changed for r in results) else EXIT_OK


def _read(path: str, errors: list[str]) -> str | None:
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        errors.append(f"{path}: cannot read: {exc}")
        return None


def _report(results: list[Converted], args: argparse.Namespace) -> None:
    """Reasons and notes on stderr; the diff (or JSON) on stdout unless ``--check`` or ``-w``."""
    if args.output == "json":
        body = [{"file": r.path, "changed": r.changed, "objects": [e.as_json() for e in r.entries],
                 **({"text": r.after} if r.changed else {})} for r in results]
        sys.stdout.write(orjson.dumps({"stage": args.stage, "files": body}, option=orjson.OPT_INDENT_2).decode()
                         + "\n")
        return
    for r in results:
        for e in r.entries:
            _report_entry(e)
        if args.check and r.changed:
            print(f"would convert {quoted(r.path)}", file=sys.stderr)
        if args.check or not r.changed or (args.write and r.path != "-"):
            continue
        if args.write:  # '-' with -w: the converted text, like a formatter reading stdin
            sys.stdout.write(r.after)
            continue
        name = "stdin" if r.path == "-" else r.path.lstrip("/")
        before, after = r.before.splitlines(keepends=True), r.after.splitlines(keepends=True)
        sys.stdout.writelines(difflib.unified_diff(before, after, quoted(f"a/{name}"), quoted(f"b/{name}")))


def _report_entry(e: Entry) -> None:
    """What convert did with one object, on stderr."""
    if e.status == "skipped":
        print(f"{quoted(e.source)}: {e.object}: not converted: {e.reason}", file=sys.stderr)
    elif e.status == "not due":
        print(f"{quoted(e.source)}: {e.object}: {e.reason}", file=sys.stderr)
    elif e.status == "invalid":
        print(f"input error: {quoted(e.source)}: {e.object}: {e.reason}", file=sys.stderr)
    elif e.status == "converted":
        made = f" (+ {', '.join(e.generated)})" if e.generated else ""
        print(f"{quoted(e.source)}: {e.object}: {e.form}{made}", file=sys.stderr)
    for note in e.notes:
        print(f"{quoted(e.source)}: {e.object}: {note}", file=sys.stderr)


def _write(results: list[Converted], roots: list[str]) -> None:
    """Each changed file written in place, through a symbolic link only to a file inside the paths given: a link
    found in a directory that resolves elsewhere (another checkout on the same CI runner) is skipped, with why."""
    written: dict[Path, str] = {}
    for r in results:
        if not r.changed or r.path == "-":
            continue
        target, reason = write_target(r.path, roots, written)
        if target is None:
            print(f"{quoted(r.path)}: not written: {reason}", file=sys.stderr)
            continue
        try:
            target.write_text(r.after, encoding="utf-8")
        except OSError as exc:
            raise CliError(f"cannot write {quoted(r.path)}: {exc}", EXIT_NO) from None
        written[target] = r.path
