"""What reading an s3:// store costs: GETs and seconds per step, read as the evaluator reads.

    .venv/bin/python benchmarks/s3_reads.py [--steps 10] [--repeats 5]

A real S3 server (moto's, on this machine: no network, so a GET's round trip here is far
shorter than a real bucket's, and the GET count is the figure that carries over) holds a
store of the debugger's benchmark job (benchmarks/debugger_overhead.py: the CPU ELU
ResNet-20, width 16, weights + gradients + losses every step, 67 tensors, 2.2 MB a step).
Every tensor of every step is read, step by step and each step's tensors in name order (as
the evaluator runs a rule that reads every tensor, ExplodingTensor), with a fresh trial,
two ways taking turns `--repeats` times:
  one GET a tensor   the reader before 2026-11-27: a ranged GET for each tensor
  read-ahead         a tensor's GET brings up to 1 MiB of those after it, the header's
                     GET is kept (debugger/readers/s3.py)
Prints the GETs of step files per step and the median seconds per step of each, and
their ratio. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from debugger_overhead import make_job  # noqa: E402

from remedy.debugger import Hook, SaveConfig  # noqa: E402
from remedy.debugger.readers import s3 as s3_reader  # noqa: E402
from remedy.debugger.trial import Trial  # noqa: E402

BUCKET = "remedy-bench"


def start_server() -> Any:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # not a line per request

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ |= {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    import boto3

    boto3.client("s3").create_bucket(Bucket=BUCKET)
    return server


def write_store(uri: str, steps: int) -> None:
    model, criterion, optimizer, x, y = make_job()
    every = SaveConfig(save_interval=1)
    hook = Hook(uri, collections={"losses": every, "gradients": every, "weights": every})
    hook.register_module(model)
    hook.register_loss(criterion)
    hook.register_optimizer(optimizer)
    for _ in range(steps):
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    hook.close()


def read_all(uri: str, one_get_a_tensor: bool) -> tuple[int, int, float]:
    """(steps, GETs of step files, seconds): every tensor, step by step, in name order."""
    reader = s3_reader.S3StoreReader(uri)
    if one_get_a_tensor:  # the reader before 2026-11-27
        reader._keep = lambda *args: None  # type: ignore[method-assign]
    gets = [0]

    def count(params: Any, **kwargs: Any) -> None:
        if str(params.get("Key", "")).endswith(".safetensors"):
            gets[0] += 1

    reader._client.meta.events.register("provide-client-params.s3.GetObject", count)
    saved = s3_reader._READ_AHEAD
    s3_reader._READ_AHEAD = 0 if one_get_a_tensor else saved
    try:
        started = time.perf_counter()
        trial = Trial(reader)
        steps = trial.steps()
        for step in steps:
            for name in trial.tensor_names(step=step):
                trial.tensor(name).value(step)
        return len(steps), gets[0], time.perf_counter() - started
    finally:
        s3_reader._READ_AHEAD = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    server = start_server()
    try:
        uri = f"s3://{BUCKET}/store"
        write_store(uri, args.steps)
        ways = {"one GET a tensor": True, "read-ahead": False}
        seconds: dict[str, list[float]] = {way: [] for way in ways}
        gets: dict[str, float] = {}
        for _ in range(args.repeats):
            for way, old in ways.items():
                steps, count, spent = read_all(uri, old)
                seconds[way].append(spent / steps)
                gets[way] = count / steps
        for way in ways:
            runs = ", ".join(f"{s * 1e3:.1f}" for s in seconds[way])
            print(
                f"{way:17} {gets[way]:5.1f} GETs/step  "
                f"{statistics.median(seconds[way]) * 1e3:7.1f} ms/step (median; runs: {runs})"
            )
        old, new = (statistics.median(seconds[way]) for way in ways)
        print(f"read-ahead / one GET a tensor: {new / old:.2f}x the time, "
              f"{gets['read-ahead'] / gets['one GET a tensor']:.2f}x the GETs")  # fmt: skip
    finally:
        server.stop()


if __name__ == "__main__":
    main()
