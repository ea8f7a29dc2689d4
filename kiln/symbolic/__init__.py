"""The ground floor: symbolic sizes, fake tensors, per-op shape rules and layouts, size expressions.

Every stage (frontend, autograd, backend, compiled_autograd) imports down into this package; it
imports nothing of kiln's but the base modules (config, exc, logs, contracts). See
docs/ARCHITECTURE.md.
"""
