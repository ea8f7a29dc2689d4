"""A check for tests: every load and store of Triton's interpreter inside the kernel's tensors.

Under TRITON_INTERPRET=1 a wrong index reads or writes host memory outside the tensors (a crash
much later, in the garbage collector); with `checked(monkeypatch)` it raises at the access."""

import numpy as np


def checked(monkeypatch):
    import triton.runtime.interpreter as interp

    ranges = []
    init = interp.GridExecutor._init_args_hst

    def init_args(self, args_dev, kwargs):
        out = init(self, args_dev, kwargs)
        ranges.clear()
        for a in out[0]:
            if hasattr(a, "untyped_storage"):
                s = a.untyped_storage()
                ranges.append((s.data_ptr(), s.data_ptr() + s.nbytes()))
        return out

    def check(ptrs, mask, what):
        p = ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)]
        if p.size == 0:
            return
        lo, hi = int(p.min()), int(p.max())
        if not any(a <= lo and hi < b for a, b in ranges):
            raise AssertionError(f"Triton kernel {what} outside its tensors: [{lo}, {hi}]")

    builder = interp.InterpreterBuilder
    load, store = builder.create_masked_load, builder.create_masked_store

    def masked_load(self, ptrs, mask, other, *rest):
        check(ptrs, mask, "load")
        return load(self, ptrs, mask, other, *rest)

    def masked_store(self, ptrs, value, mask, *rest):
        check(ptrs, mask, "store")
        return store(self, ptrs, value, mask, *rest)

    monkeypatch.setattr(interp.GridExecutor, "_init_args_hst", init_args)
    monkeypatch.setattr(builder, "create_masked_load", masked_load)
    monkeypatch.setattr(builder, "create_masked_store", masked_store)
