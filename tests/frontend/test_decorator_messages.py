"""Errors of kiln's decorators name their cause in the words torch's own give for the same
misuse."""

import pytest

import kiln


def test_disallow_in_graph_on_a_user_function_says_what_it_expects():
    def plain(x):
        return x.cos()

    with pytest.raises(RuntimeError, match="disallow_in_graph is expected to be used on"):
        kiln.disallow_in_graph(plain)
