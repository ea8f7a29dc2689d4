"""Ahead-of-time autograd: ATen tracing, functionalization, joint graphs and partitioning."""
