"""Keyword arguments to builtins kiln runs itself: the builtin's own keywords, nothing else."""

import torch
from frontend_helpers import run_and_compare


def dict_keys_named_like_parameters(x):
    a = dict(obj={"k": 2})  # a key "obj", not a mapping to copy
    b = dict(obj=[("p", 3)], self=1, tx=2)
    c = dict([(1, 2)], obj=x)
    return x + 1, a, b, list(c)


def test_dict_keywords_are_keys():
    run_and_compare(dict_keys_named_like_parameters, torch.ones(2))


def keywords_builtins_refuse(x):
    out = []
    for call in (lambda: len(obj=[1]), lambda: sum(obj=[1, 2]), lambda: abs(obj=-1)):
        try:
            out.append(call())
        except TypeError as e:
            out.append(type(e).__name__)
    return x * 2, out


def test_keywords_a_builtin_does_not_take_raise():
    run_and_compare(keywords_builtins_refuse, torch.ones(2))


def keywords_builtins_take(x):
    return (
        x - 1,
        sorted([3, 1, 2], key=lambda v: -v, reverse=True),
        sum([1, 2], start=10),
        list(enumerate("ab", start=5)),
        pow(base=2, exp=5, mod=7),
        max([1, 5, 2], key=lambda v: -v),
        min([], default=4),
    )


def test_keywords_a_builtin_takes_still_work():
    run_and_compare(keywords_builtins_take, torch.ones(2))
