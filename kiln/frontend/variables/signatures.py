"""inspect.Signature of a code object's parameters, made once per code and defaults layout."""

import inspect
import types

from kiln.bytecode.code_cache import CodeCache

# Note [Signatures: cached per code]
# bind_args binds traced arguments with inspect's Signature.bind (its rules, its errors). Building
# the signature (inspect.signature of a throwaway function) cost more than the bind itself, at
# every inlined call. A signature depends only on the code object (parameter names and kinds),
# how many positional defaults there are and which keyword-only ones have a default, so it is made
# once per such layout, with DefaultSlot markers as defaults that the caller replaces with the
# call's own default values after apply_defaults().
_signatures = CodeCache(512)


class DefaultSlot:
    """Stands for a default value in a cached signature: positional index or keyword name."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __repr__(self):
        return f"<default {self.key!r}>"


def code_signature(code: types.CodeType, n_defaults: int, kw_defaults: frozenset):
    """The Signature of a function of `code` with that many positional defaults and keyword-only
    defaults for the names in `kw_defaults` (DefaultSlot markers as the default values)."""
    layouts = _signatures.get(code)
    if layouts is None:
        layouts = {}
        _signatures.put(code, layouts)
    key = (n_defaults, kw_defaults)
    sig = layouts.get(key)
    if sig is None:
        cells = tuple(types.CellType() for _ in code.co_freevars) or None
        shell = types.FunctionType(code, {}, code.co_name, None, cells)
        shell.__defaults__ = tuple(DefaultSlot(i) for i in range(n_defaults)) or None
        shell.__kwdefaults__ = {k: DefaultSlot(k) for k in kw_defaults} or None
        sig = layouts[key] = inspect.signature(shell)
    return sig
