"""Class attributes that are tables, read through an instance made in the frame: a tuple of
classes (`(int, float, complex)`) as those classes; a dict read from the class, guarded, so a
change to it between calls is seen (torch.testing's pair classes read both in assertEqual)."""

import torch
from frontend_helpers import run_and_compare

import kiln


class Base:
    _TO_DTYPE = {int: torch.int64, float: torch.float64}
    _NUMBERS = (int, float, complex)


class Pair(Base):
    def __init__(self, value):
        self.value = value

    def dtype(self):
        if type(self.value) not in self._TO_DTYPE or not isinstance(self.value, self._NUMBERS):
            return None
        return self._TO_DTYPE[type(self.value)]


def reads_the_tables(x):
    return x.to(Pair(3).dtype()), Pair(2.5).dtype(), Pair("s").dtype()


def test_class_tables_read_from_an_object_made_in_the_frame():
    run_and_compare(reads_the_tables, torch.ones(2), expected_breaks=0)


def test_a_change_to_the_class_dict_is_seen_by_the_next_call():
    compiled = kiln.compile(reads_the_tables, backend="eager")
    t = torch.ones(2)
    assert compiled(t)[0].dtype == torch.int64
    Base._TO_DTYPE[int] = torch.int32
    try:
        got, want = compiled(t), reads_the_tables(t)
        assert got[0].dtype == want[0].dtype == torch.int32 and got[1:] == want[1:]
    finally:
        Base._TO_DTYPE[int] = torch.int64
