"""Every spelling of "is this code being compiled" answers True in a compiled frame, so that
library code written against any of them takes its compiled path."""

import torch

import kiln


def test_all_spellings_agree():
    queries = [
        torch.compiler.is_compiling,
        torch.compiler.is_dynamo_compiling,
        torch._utils.is_compiling,
    ]
    for query in queries:

        def fn(x, query=query):
            return x + 1 if query() else x - 1

        x = torch.zeros(2)
        assert torch.equal(fn(x), x - 1)
        got = kiln.compile(fn, backend="eager", fullgraph=True)(x)
        assert torch.equal(got, x + 1), query
