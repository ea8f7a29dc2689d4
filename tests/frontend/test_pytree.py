"""torch.utils._pytree's tree functions inside compiled code: flatten, unflatten, leaves, structure,
tree_map and tree_map_only on lists, tuples, dicts, namedtuples, deques and torch.return_types."""

import collections

import pytest
import torch
import torch.utils._pytree as pytree
from frontend_helpers import run_and_compare

import kiln

Point = collections.namedtuple("Point", ["x", "y"])


def _mixed(x):
    return {
        "a": [x, x - 1],
        "b": x + 2,
        "c": (x, 3.0, collections.deque([0.0, -x, 1, 2], maxlen=3)),
        "d": collections.OrderedDict(
            {"e": torch.return_types.qr((2 * x, None)), "f": Point(x + 1, torch.zeros(2))}
        ),
    }


def clone_round_trip(xs):
    leaves, spec = pytree.tree_flatten(xs)
    return pytree.tree_unflatten([t.clone() * 2 for t in leaves], spec)


@pytest.mark.parametrize(
    "make",
    [
        lambda t: [t, t + 1, t + 2],
        lambda t: ([t, t], (t + 1,), [[t * 2]]),
        lambda t: {"b": [t, t], "a": (t, {"z": t + 1, "y": t})},
        lambda t: Point(t, [t + 1, Point(t, t)]),
    ],
)
def test_flatten_unflatten_round_trip(make):
    run_and_compare(clone_round_trip, make(torch.randn(3)), expected_graphs=1, fullgraph=True)


def leaves_of_mixed(x):
    leaves = pytree.tree_leaves(_mixed(x))
    return leaves, len(leaves)


def test_tree_leaves_of_every_container_kind():
    # None is a leaf; the deque keeps its last 3 items; qr and Point are nodes
    run_and_compare(leaves_of_mixed, torch.randn(3), expected_graphs=1, fullgraph=True)


def unflatten_new_leaves(x, y):
    leaves, spec = pytree.tree_flatten(_mixed(x))
    new = [x - 1, y, x * y, 3.0, y - 2, 1, y + 5, 2 * y, -y, x + y, "s", torch.ones(2)]
    tree = pytree.tree_unflatten(new, spec)
    d = tree["d"]
    return (
        leaves[0],
        tree["a"],
        tree["c"][0],
        list(tree["c"][2]),
        tree["c"][2].maxlen,
        type(tree["c"][2]).__name__,
        type(d).__name__,
        list(d),
        type(d["e"]).__name__,
        d["e"].Q,
        d["e"].R,
        type(d["f"]).__name__,
        d["f"].y,
    )


def test_tree_unflatten_rebuilds_each_node_type():
    run_and_compare(
        unflatten_new_leaves, torch.randn(3), torch.randn(3), expected_graphs=1, fullgraph=True
    )


def map_two_trees(x, y):
    tree1 = {"a": [x, x - 1], "b": x + 2, "c": (x, Point(x, 1.0))}
    tree2 = collections.OrderedDict([("c", (y, Point(-y, 2.0))), ("b", y * 3), ("a", [y, y + 1])])
    return pytree.tree_map(
        lambda u, v: u * v if isinstance(u, torch.Tensor) else u + v, tree1, tree2
    )


def test_tree_map_matches_a_second_tree_by_dict_key():
    run_and_compare(
        map_two_trees, torch.randn(3), torch.randn(3), expected_graphs=1, fullgraph=True
    )


def map_keeps_dict_order(tree):
    new = pytree.tree_map(lambda t: t + 1, tree)
    return type(new).__name__, list(new.keys()), list(new.values())


@pytest.mark.parametrize("kind", [dict, collections.OrderedDict])
def test_tree_map_keeps_the_dict_type_and_order(kind):
    x = torch.randn(2)
    tree = kind([("b", x + 2), ("a", x), ("c", x - 1)])
    run_and_compare(map_keeps_dict_order, tree, expected_graphs=1, fullgraph=True)


def map_defaultdict(x):
    tree = collections.defaultdict(int, {"b": x, "a": x + 1})
    new = pytree.tree_map(lambda t: t * 2, tree)
    return type(new).__name__, new.default_factory, list(new), new["a"], new["missing"]


def test_tree_map_of_a_defaultdict_keeps_its_factory():
    run_and_compare(map_defaultdict, torch.randn(2), expected_graphs=1, fullgraph=True)


def map_only_tensors(xs):
    return pytree.tree_map_only(torch.Tensor, lambda t: t.clone() + 1, xs)


def map_only_ints(xs):
    return pytree.tree_map_only((int, float), lambda n: n * 10, xs)


def test_tree_map_only_leaves_other_leaves_alone():
    xs = [torch.tensor(i) for i in range(3)] + ["hi", 4]
    tree = {"aa": (xs, xs), "ab": xs}
    run_and_compare(map_only_tensors, tree, expected_graphs=1, fullgraph=True)
    run_and_compare(map_only_ints, tree, fullgraph=True)


def structure_and_leaf_count(x):
    spec = pytree.tree_structure({"a": [x, x], "b": (x,)})
    same = spec == pytree.tree_structure({"a": [1, 2], "b": (3,)})
    return spec, spec.num_leaves, same, x + 1


def test_tree_structure_is_a_constant_spec():
    run_and_compare(structure_and_leaf_count, torch.randn(2), expected_graphs=1, fullgraph=True)


def unflatten_too_few(x):
    _, spec = pytree.tree_flatten([x, x, x])
    try:
        return pytree.tree_unflatten([x], spec)
    except ValueError as e:
        return str(e), x + 1


def map_mismatched(x):
    try:
        return pytree.tree_map(lambda a, b: a + b, [x, x], [x])
    except ValueError as e:
        return str(e), x - 1


def test_mismatches_raise_eagers_error_in_the_frame():
    run_and_compare(unflatten_too_few, torch.randn(2), expected_graphs=1, fullgraph=True)
    run_and_compare(map_mismatched, torch.randn(2), expected_graphs=1, fullgraph=True)


def with_is_leaf(x):
    return pytree.tree_leaves([x + 1, (x, x)], is_leaf=lambda n: isinstance(n, tuple))


def stacks_pairs(tree):
    return pytree.tree_map(
        lambda pair: torch.stack(pair).sum(0), tree, is_leaf=lambda n: isinstance(n, tuple)
    )


def flattens_lists_whole(x):
    leaves, spec = pytree.tree_flatten({"a": [x, x], "b": x}, lambda n: isinstance(n, list))
    return [len(v) if isinstance(v, list) else v * 2 for v in leaves], spec.num_leaves


def maps_with_paths_to_lists(x):
    tree = {"a": [x], "b": (x, x + 1)}
    return pytree.tree_map_with_path(
        lambda path, v: v * len(path), tree, is_leaf=lambda n: isinstance(n, list)
    )


def only_two_long(x):
    tree = {"keep": x, "other": (1, 2), "long": x.repeat(2)}
    return pytree.tree_map_only(
        lambda n: isinstance(n, torch.Tensor) and n.shape == (2,), torch.neg, tree
    )


asked = []


def is_leaf_with_a_log(n):
    asked.append(type(n).__name__)
    return isinstance(n, dict) and "z" in n


def logs_is_leaf(x):
    return pytree.tree_leaves({"a": {"z": x}, "b": [x, {"c": x}]}, is_leaf=is_leaf_with_a_log)


def leaf_by_data(x):
    return pytree.tree_leaves(
        [x, [x]], is_leaf=lambda n: bool(n.sum() > 0) if isinstance(n, torch.Tensor) else False
    )


@pytest.mark.parametrize(
    "fn", [with_is_leaf, flattens_lists_whole, maps_with_paths_to_lists, only_two_long]
)
def test_is_leaf_callbacks_and_predicates_are_traced(fn):
    # Note [Pytree: is_leaf]: the node picked is a leaf, container or not
    run_and_compare(fn, torch.randn(2), expected_graphs=1, fullgraph=True)


def test_is_leaf_picks_tuples_of_input_tensors():
    run_and_compare(stacks_pairs, [(torch.ones(2), torch.randn(2))], fullgraph=True)


def test_is_leaf_is_asked_of_every_node_in_eagers_order():
    asked.clear()
    expected = logs_is_leaf(torch.ones(2))
    order, _ = list(asked), asked.clear()
    got = kiln.compile(logs_is_leaf, fullgraph=True)(torch.ones(2))
    assert len(got) == len(expected) and asked == order, (asked, order)


def test_an_is_leaf_answer_on_tensor_data_is_a_graph_break_with_a_reason():
    run_and_compare(leaf_by_data, torch.randn(2))
    with pytest.raises(kiln.exc.Unsupported, match="is_leaf callback or predicate"):
        kiln.compile(leaf_by_data, fullgraph=True)(torch.randn(2))


class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b


pytree.register_pytree_node(
    Pair,
    lambda p: ([p.a, p.b], "pair"),
    lambda xs, context: Pair(*xs),
    serialized_type_name="tests.frontend.test_pytree.Pair",
)


def user_nodes(p, x):
    tree = {"p": p, "l": [x, Pair(x + 1, 3)]}
    leaves, spec = pytree.tree_flatten(tree)
    new = pytree.tree_unflatten([v * 2 for v in leaves], spec)
    mapped = pytree.tree_map(lambda v: v - 1, [p, x])
    same_spec = spec == pytree.tree_structure({"p": p, "l": [x, Pair(x, 0)]})
    inner = new["l"][1]
    return (
        leaves,
        new["p"].a,
        new["p"].b,
        type(inner).__name__,
        inner.a,
        inner.b,
        mapped[0].b,
        same_spec,
    )


def test_registered_user_nodes_trace_their_flatten_and_unflatten_functions():
    p = Pair(torch.ones(2), torch.randn(2))
    run_and_compare(user_nodes, p, torch.randn(2), expected_graphs=1, fullgraph=True)


def map_two_trees_of_user_nodes(p, q):
    return pytree.tree_map(lambda u, v: u + v, p, q)


def test_tree_map_of_several_trees_with_user_nodes_is_a_break_with_a_reason():
    p, q = Pair(torch.ones(2), torch.zeros(2)), Pair(torch.ones(2), torch.ones(2))
    kiln.reset()
    out = kiln.compile(map_two_trees_of_user_nodes)(p, q)
    assert torch.equal(out.a, p.a + q.a) and torch.equal(out.b, p.b + q.b)
    with pytest.raises(kiln.exc.Unsupported, match="several trees holding registered user nodes"):
        kiln.compile(map_two_trees_of_user_nodes, fullgraph=True)(p, q)


def spec_methods(x):
    flat, spec = pytree.tree_flatten({"a": x, "b": [x * 2, x * 3]})
    return sum(flat), spec.num_leaves, spec.num_nodes, spec.is_leaf(), spec.child(1).num_leaves


def test_treespec_fields_and_methods_fold():
    run_and_compare(spec_methods, torch.randn(3), expected_graphs=1, fullgraph=True)


def key_path_text(x):
    path = (pytree.MappingKey("a"), pytree.SequenceKey(0), pytree.GetAttrKey("w"))
    return x * 2, f"path={path}", path[1].idx


def test_key_path_entries_of_constants_are_constants():
    run_and_compare(key_path_text, torch.randn(3), expected_graphs=1, fullgraph=True)


def _mapped_with_paths(tree, other, seen):
    def mapper(path, x, y):
        seen.append(pytree.keystr(path))
        return x + y if isinstance(x, torch.Tensor) else x

    out = pytree.tree_map_with_path(mapper, tree, other)
    pairs = pytree.tree_leaves_with_path(tree)
    flat, spec = pytree.tree_flatten_with_path(other)
    return out, [(pytree.keystr(p), v * 2) for p, v in pairs], len(flat), flat[0][0], spec


def test_tree_map_with_path_and_its_flattens():
    # PyTorch's test_tree_map.py: key paths are constants, each leaf mapped with its path
    tree = {"a": torch.ones(2), "b": [torch.zeros(2), (torch.ones(3), 4)]}
    other = {"a": torch.full((2,), 2.0), "b": [torch.ones(2), (torch.ones(3), 5)]}
    run_and_compare(_mapped_with_paths, tree, other, [], fullgraph=True, expected_breaks=0)


def only_over_two_trees(x):
    # (the second tree lands in is_leaf: eager's TypeError)
    return pytree.tree_map_only(torch.Tensor, lambda a, b: a + b, {"a": x}, {"a": x + 1})


def test_a_tree_given_as_is_leaf_raises_eagers_type_error():
    run_and_compare(only_over_two_trees, torch.randn(2))
