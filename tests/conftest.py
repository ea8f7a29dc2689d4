"""Settings for kiln's own test suite."""

from kiln import config

# Note [Faults: the crash contract]: users get one warning and eager execution when kiln fails
# internally; kiln's own tests must see the error. A test about the fallback turns this off.
config.strict = True

# Note [Tracer: imports during a trace]: a module first imported while kiln's ATen tracer runs sees
# torch.compiler.is_compiling() True, and transformers then skips registering the ModelOutput
# classes it defines as pytree nodes (aot then refuses their instances). Which test imports
# transformers' output classes first depends on how pytest-xdist hands out tests, so the suite
# imports them up front, as a user who builds the model before compiling it does.
try:
    import transformers.modeling_outputs  # noqa: F401
except ImportError:
    pass

# Note [Guards: tensor checks in C++]: the extension is built in the background at a process's
# first guard, so which guards use it would depend on timing. The suite waits for it (built once
# per machine; loaded from the cache after) so every guard takes the path users get.
from kiln.frontend import guard_vm, tensor_match  # noqa: E402

tensor_match.module(wait=True)
guard_vm.module(wait=True)  # (Note [Guards: a program evaluated in C]: the same for programs)
