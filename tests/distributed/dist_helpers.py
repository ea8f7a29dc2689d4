"""Run a worker script in 2 gloo processes on 127.0.0.1 and collect each scenario's result.

A worker script defines `SCENARIOS` (name -> fn(rank, world) -> dict of checks) and calls
`main()`; every scenario runs in the same two processes (one spawn: importing torch and kiln
twice is most of the time), and rank 0 writes {name: {"ok": bool, "error": str, ...}} as JSON.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys
import traceback

import pytest
import torch
import torch.distributed as dist

ROOT = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT_S = 420


NEEDS_GLOO = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed gloo"
)


def results_fixture(worker):
    """A module-scoped fixture: every scenario of the worker script next to this file, run once."""

    @pytest.fixture(scope="module")
    def results(tmp_path_factory):
        path = pathlib.Path(__file__).with_name(worker)
        return run_workers(path, tmp_path_factory.mktemp(path.stem))

    return results


def free_port():
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(script, tmp_path, world=2):
    """Run `script` (a path) in `world` processes; returns rank 0's results dict."""
    out = tmp_path / "results.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(pathlib.Path(script).parent)])
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, str(script), str(out), str(world), str(free_port())]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    if proc.returncode != 0 or not out.exists():
        raise AssertionError(f"workers failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(out.read_text())


def _worker(rank, world, port, scenarios, out):
    import faulthandler

    import torch.distributed as dist

    import kiln

    faulthandler.enable()  # a rare abort in a worker ("terminate called ...") prints its stacks

    kiln.config.strict = True
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = {}
    try:
        for name, fn in scenarios.items():
            kiln.reset()
            torch.manual_seed(0)
            try:
                results[name] = {"ok": True, **fn(rank, world)}
            except Exception:
                results[name] = {"ok": False, "error": traceback.format_exc()}
            dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        pathlib.Path(out).write_text(json.dumps(results))
    # The results are written: leave without the interpreter's teardown. Under load a process
    # aborted there, after its last Python frame ("terminate called without an active
    # exception": a C++ thread of the process group destroyed unjoined, faulthandler showed no
    # Python frame), and spawn reported the whole run as failed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(scenarios):
    """Entry of a worker script: spawn the processes and run every scenario in them."""
    import torch.multiprocessing as mp

    out, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    mp.spawn(_worker, args=(world, port, scenarios, out), nprocs=world)
