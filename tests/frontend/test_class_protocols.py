"""Class-level protocols traced in the frame (test_misc part 5/1): `super().attr` of a plain class
attribute, a metaclass's Python __instancecheck__, and the `__mro__` of a torch class; compiled
with fullgraph=True and compared with eager."""

import torch
from frontend_helpers import assert_same, run_and_compare

import kiln


class Base:
    scale = 4

    def mul(self, x):
        return x * 0.5


class Middle(Base):
    scale = 7


class Leaf(Middle):
    def add(self, x):
        return super().scale * x + super(Middle, self).scale + super().mul(x)


def test_super_reads_a_plain_class_attribute_of_the_parent():
    run_and_compare(Leaf().add, torch.ones(3), fullgraph=True, expected_graphs=1)


def leaf_made_in_the_frame(x):
    obj = Leaf()
    return super(Middle, obj).scale * x, super(Leaf, obj).scale


def test_super_attribute_of_an_object_made_in_the_frame():
    run_and_compare(leaf_made_in_the_frame, torch.ones(3), fullgraph=True, expected_graphs=1)


def test_super_attribute_is_guarded_a_later_class_change_recompiles():
    class A:
        a = 4

    class B(A):
        def f(self, x):
            return super().a * x

    kiln.reset()
    obj = B()
    compiled = kiln.compile(obj.f, fullgraph=True)
    x = torch.ones(2)
    assert_same(obj.f(x), compiled(x))
    A.a = 5
    assert_same(obj.f(x), compiled(x))


class TagMeta(type):
    def __instancecheck__(cls, instance):
        return getattr(instance, "tag", None) == cls.wanted


class Tagged(metaclass=TagMeta):
    wanted = "yes"


class Plain:
    pass


def check_tag(x, obj):
    if isinstance(obj, Tagged):
        return x + 1
    return x - 1


def test_metaclass_instancecheck_is_run_on_the_object():
    run_and_compare(check_tag, torch.ones(2), Plain(), fullgraph=True, expected_graphs=1)
    tagged = Plain()
    tagged.tag = "yes"
    run_and_compare(check_tag, torch.ones(2), tagged, fullgraph=True, expected_graphs=1)


def test_metaclass_instancecheck_skipped_for_an_exact_instance():
    # (Python answers True for type(obj) is cls before asking the metaclass)
    run_and_compare(check_tag, torch.ones(2), Tagged(), fullgraph=True, expected_graphs=1)


def test_metaclass_instancecheck_sees_a_tag_set_in_the_frame():
    def fn(x, obj):
        obj.tag = "yes"
        return check_tag(x, obj)

    run_and_compare(fn, torch.ones(2), Plain(), fullgraph=True, expected_graphs=1)


def mro_names(x):
    names = []
    tensor_type = type(torch.ones(2))
    for cls in tensor_type.__mro__:
        names.append(cls.__name__)
    return x + len(names), names


def test_mro_of_a_torch_class_is_iterated():
    run_and_compare(mro_names, torch.ones(2), fullgraph=True, expected_graphs=1)
