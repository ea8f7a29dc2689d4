"""decode() caches per code object: each call hands out its own list; dead code objects go."""

import gc

import kiln.bytecode as B
from kiln.bytecode import codec
from kiln.bytecode.code_cache import CodeCache


def _looping(xs):
    total = 0
    for x in xs:
        try:
            total += 10 // x
        except ZeroDivisionError:
            total -= 1
    return total


def test_each_decode_is_a_separate_copy():
    code = _looping.__code__
    first = B.decode(code)
    second = B.decode(code)
    assert [i.opname for i in first] == [i.opname for i in second]
    assert all(a is not b for a, b in zip(first, second))
    # targets and exception entries point into their own list
    ids = {id(i) for i in second}
    for inst in second:
        if inst.target is not None:
            assert id(inst.target) in ids
        e = inst.exn_tab_entry
        if e is not None:
            assert {id(e.start), id(e.end), id(e.target)} <= ids
    # editing one copy leaves the next decode untouched
    first[0].opname = "NOP"
    first.insert(0, B.make_inst("NOP"))
    third = B.decode(code)
    assert [i.opname for i in third] == [i.opname for i in second]
    # and the copy still assembles into code that runs like the original
    f = type(_looping)(B.encode(third, like=code), globals())
    assert f([1, 0, 5]) == _looping([1, 0, 5])


def test_a_dead_code_objects_entry_goes():
    ns = {}
    exec("def g(a):\n    return a + 1\n", ns)
    code = ns.pop("g").__code__
    B.decode(code)
    assert codec._cache.get(code) is not None
    key = id(code)
    del code
    gc.collect()  # (other tests' dead code objects may go too: only this entry is checked)
    assert key not in codec._cache._entries


def test_code_cache_is_bounded_and_by_identity():
    cache = CodeCache(2)
    codes = []
    for k in range(3):
        ns = {}
        exec(f"def g():\n    return {k}\n", ns)
        codes.append(ns["g"].__code__)
    for k, code in enumerate(codes):
        cache.put(code, k)
    assert len(cache) == 2
    assert cache.get(codes[0]) is None  # least recently used went first
    assert cache.get(codes[2]) == 2
    twin = compile("def g():\n    return 2\n", "<string>", "exec").co_consts[0]
    assert twin == codes[2] and cache.get(twin) is None  # equal but not the same object
