"""A small cache keyed by code-object identity, holding its keys weakly, least recently used out."""

from __future__ import annotations

import functools
import weakref


class CodeCache:
    """{code object: value} by identity for the last `size` code objects; a dead one's entry goes."""

    def __init__(self, size):
        self.size = size
        self._entries = {}  # id(code) -> (weak reference, value), oldest first

    def get(self, code, default=None):
        """The value stored for this very code object, else `default`."""
        key = id(code)
        hit = self._entries.get(key)
        if hit is None or hit[0]() is not code:
            return default
        self._entries[key] = self._entries.pop(key)  # most recently used last
        return hit[1]

    def put(self, code, value):
        """Store `value` for `code` (a key that takes no weak reference is not stored)."""
        key = id(code)
        try:
            ref = weakref.ref(code, functools.partial(self._forget, key))
        except TypeError:
            return
        self._entries.pop(key, None)
        self._entries[key] = (ref, value)
        while len(self._entries) > self.size:
            del self._entries[next(iter(self._entries))]

    def clear(self):
        self._entries.clear()

    def __len__(self):
        return len(self._entries)

    def _forget(self, key, ref):
        """Weakref callback: drop a dead code object's entry (unless its id was reused since)."""
        hit = self._entries.get(key)
        if hit is not None and hit[0] is ref:
            del self._entries[key]
