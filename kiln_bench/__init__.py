"""kiln's benchmark harness (`kiln bench`): the model suite, the runner and its report.

It lives beside the compiler, not inside it: it runs torch.compile as the reference that kiln is
measured against, which the compiler package itself never imports (tests/test_import_boundary.py).
"""
