"""`webhook/policy/yaml_lines.py`: the one alias check (``first_alias``) and policy/suite files refusing aliases."""

from __future__ import annotations

from webhook.policy.yaml_lines import first_alias, parse_documents


def test_first_alias_finds_aliases_and_merge_keys_with_line_and_document() -> None:
    found = first_alias("a: 1\n---\nx: &a [1]\ny: [*a]\n")
    assert found is not None and (found.line, found.document, found.name) == (4, 2, "a")
    merge = first_alias(b"base: &b {k: 1}\nother:\n  <<: *b\n")
    assert merge is not None and (merge.line, merge.name) == (3, "b")
    odd = first_alias("k: &-x_1 1\nj: *-x_1\n")  # an anchor name may start with a dash
    assert odd is not None and odd.name == "-x_1"


def test_first_alias_leaves_anchors_globs_and_quoted_stars() -> None:
    assert first_alias("a: &x 1\nb: '*/5 * * * *'\nc: [\"*.txt\", 'x *y', a &b]\nd: 2 * 3\n") is None
    assert first_alias("a: [1\n") is None  # a syntax error is the loader's to report


def test_a_policy_file_with_an_alias_is_one_problem_with_its_line() -> None:
    docs, problems = parse_documents("p.yaml", b"a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n")
    assert docs == [] and [str(p) for p in problems] == [
        "p.yaml:2: document 1: YAML alias *a refused: an alias repeats what its anchor holds, so a file of a few "
        "hundred bytes can expand to gigabytes; write the values out"]
