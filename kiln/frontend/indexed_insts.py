"""The instruction lists translators run: decoded once per code object, indexed, shared."""

from kiln.bytecode import decode as bytecode_decode
from kiln.bytecode.code_cache import CodeCache
from kiln.frontend.unbound_cells import unguarded_entry

# Note [Translator: shared instruction lists]
# A translator only reads its instructions (resume and call-through code edit their own copies
# from kiln.bytecode.decode), so every translator of one code object shares one indexed list,
# made at the first call: an inlined callee called thousands of times in a loop is decoded once.
# Nothing may write to these lists or their instructions.
_indexed = CodeCache(512)


def decode(code):
    """The instructions of a code object (kiln.bytecode.decode) with `index` and `target_index`;
    shared and read-only (Note [Translator: shared instruction lists])."""
    insts = _indexed.get(code)
    if insts is None:
        insts = _indexed_copy(code)
        _indexed.put(code, insts)
    return insts


def _indexed_copy(code):
    """A fresh decode(code)."""
    insts = bytecode_decode(code)
    where = {id(inst): n for n, inst in enumerate(insts)}
    for n, inst in enumerate(insts):
        inst.index = n
        inst.target_index = where[id(inst.target)] if inst.target is not None else None
        inst.exn_tab_entry = unguarded_entry(inst)
        if inst.lineno is None:
            inst.lineno = insts[n - 1].lineno if n else code.co_firstlineno
    return insts
