"""Compiled regexes, dict keys that are tuples of builtin classes and literals (the re module's
`_cache[type(pattern), pattern, flags]`), and a bare `raise` with no active exception."""

import re

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln

CACHE = {(str, "a", 0): 10, (int, "a", 0): 20}
WORD = re.compile(r"(\w+)-(\d+)")


def test_tuple_of_classes_key_reads_global_dict():
    def fn(x, p):
        return x + CACHE[type(p), p, 0] + (1 if (bytes, p, 0) in CACHE else 2)

    run_and_compare(fn, torch.ones(2), "a", fullgraph=True, expected_graphs=1)


def test_tuple_of_classes_key_is_guarded_on_the_value():
    def fn(x):
        return x + CACHE[str, "a", 0]

    compiled = kiln.compile(fn, fullgraph=True)
    x = torch.ones(2)
    assert torch.equal(compiled(x), fn(x))
    CACHE[str, "a", 0] = 11
    try:
        assert torch.equal(compiled(x), fn(x))  # the item changed: traced again, not reused
    finally:
        CACHE[str, "a", 0] = 10


@pytest.mark.parametrize("text", ["ab-12", "no match"])
def test_compiled_regex_methods_fold(text):
    def fn(x):
        m = WORD.search(text)
        if m:
            return x * int(m.group(2)), m.group(1), m.span()
        return x - 1, WORD.pattern, WORD.flags

    run_and_compare(fn, torch.ones(2), fullgraph=True, expected_graphs=1)


def test_assert_raises_regex_pattern():
    def fn(x):
        return x + 1 if re.compile("b+").fullmatch("bbb") else x

    run_and_compare(fn, torch.ones(2), fullgraph=True)


def test_bare_raise_with_no_active_exception():
    def fn(x):
        try:
            raise  # noqa: PLE0704
        except RuntimeError as e:
            return x + 1, str(e)

    run_and_compare(fn, torch.ones(2), fullgraph=True, expected_graphs=1)


def test_bare_raise_with_no_active_exception_escapes():
    def fn(x):
        x = x + 1
        raise  # noqa: PLE0704

    run_and_compare(fn, torch.ones(2))


def test_bare_raise_reraises_the_callers_exception():
    def fn(x):
        x = x + 1
        raise  # noqa: PLE0704

    compiled = kiln.compile(fn)
    for f in (fn, compiled):
        try:
            raise KeyError("outer")
        except KeyError:
            with pytest.raises(KeyError, match="outer"):
                f(torch.ones(2))


SEPARATORS = re.compile(r"[._-]")
ALLOWED = frozenset("0123456789.+abcrcdevpost")


def test_regex_split_and_findall_give_new_lists():
    def fn(x):
        parts = SEPARATORS.split("1.2-rc_3")
        parts.append("tail")  # (a new list each call: appending is the frame's own business)
        digits = WORD.findall("ab-12 cd-34")
        return x + len(parts) + len(digits), parts, digits

    run_and_compare(fn, torch.ones(2), fullgraph=True, expected_graphs=1)


def test_frozenset_queries_fold():
    def fn(x):
        ok = ALLOWED.issuperset("2.13.0+cpu") and not ALLOWED.isdisjoint({"1"})
        return x + ok, ALLOWED.issubset(ALLOWED), ALLOWED.copy() is ALLOWED

    run_and_compare(fn, torch.ones(2), fullgraph=True, expected_graphs=1)


def test_new_frozensets_keep_their_identity():
    def fn(x):
        u = ALLOWED.union()
        both = ALLOWED.intersection("a1z")
        return x + 1, u is ALLOWED, u == ALLOWED, sorted(both)

    run_and_compare(fn, torch.ones(2))
