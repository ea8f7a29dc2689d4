"""A user module imported inside compiled functions (tests/frontend/test_closures.py): its
attributes are state the compiled code must read as eager does."""

import torch

SCALE = torch.full((3,), 2.0)
FLAG = True
