"""A dict input changed by the trace is replayed key by key where its order allows (Note [Side
effects: dicts replayed key by key]); the dict afterwards equals eager's, order included."""

import pickle

import torch
from frontend_helpers import run_and_compare

import kiln


def setitem_del_and_add(x, d):
    d["b"] = 20
    del d["a"]
    d["z"] = x.shape[0]
    return x + 1


def test_set_delete_and_add_keys_of_an_input_dict():
    run_and_compare(setitem_del_and_add, torch.ones(2), {"a": 1, "b": 2, "c": 3})


def readd_and_move(x, d):
    d.pop("a")
    d["a"] = 5  # deleted and added again: now last
    return x + 1


def test_a_key_deleted_and_added_again_moves_to_the_end():
    run_and_compare(readd_and_move, torch.ones(2), {"a": 1, "b": 2})


def helper(v):
    return v * 2


def store_a_global_then_break(x):
    class Made(tuple):
        pass

    globals()["made_in_the_frame"] = Made
    y = helper(x + 1)  # a call after the store: the transformed code loads its own globals
    return pickle.loads(pickle.dumps(3)), y, globals()["made_in_the_frame"].__name__


def test_globals_dict_stored_into_keeps_the_names_the_transformed_code_loads():
    compiled = kiln.compile(store_a_global_then_break, backend="eager")
    eager = store_a_global_then_break(torch.ones(2))
    for _ in range(2):
        got = compiled(torch.ones(2))
        assert got[0] == eager[0] and got[2] == eager[2] == "Made"
        torch.testing.assert_close(got[1], eager[1])
