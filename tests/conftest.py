"""Settings for kiln's own test suite."""

from kiln import config

# Note [Faults: the crash contract]: users get one warning and eager execution when kiln fails
# internally; kiln's own tests must see the error. A test about the fallback turns this off.
config.strict = True
