"""Memory per device of a sharded model and of its captured activations: 1 device against 8.

    .venv/bin/python bench/mesh.py [--d-model 256] [--layers 4] [--batch 16] [--seq 64] [--steps 3]

Each mesh runs in its own process with XLA_FLAGS giving it 8 CPU devices (1 for the baseline):
a 4-block lenscope.models.Transformer language model on random tokens, state created sharded by the
built-in rules (FSDP over `data`, attention heads and MLP width over `model`). Reported per device
(device 0; every device holds the same share):

  params         bytes of the parameters (addressable shard)
  train state    parameters + Adam moments + step and key
  activation     the largest captured activation an analysis returns unreduced (the MLP hidden
                 layer [batch, seq, 4 d_model] of the last block), as the forward sharded it
  analysis temp  the compiled analysis executable's scratch memory (XLA memory analysis)
  step temp      the compiled train step's scratch memory (activations and gradients in flight)
  step ms        median train step; CPU devices share this machine's cores, so only the
                 memory figures say what a real mesh of 8 accelerators would see

Nothing here asserts a number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
from _lm import LMConfig, LMTrainer

from lenscope.analysis import AnalysisBase
from lenscope.models import Transformer

SRC = Path(__file__).resolve().parents[1] / "src"
MESHES = [("1 device", 1, []), ("8 devices: 8 (data)", 8, ["mesh/shape=[8]"]),
          ("8 devices: 4x2 (data x model)", 8, ["mesh/shape=[4,2]", "mesh/axes=[data,model]"])]


class Hidden(AnalysisBase[LMConfig, Transformer], LMTrainer):
    """The last block's MLP hidden activation, returned whole (unreduced) to measure how it is sharded."""

    NAME = "hidden"

    def select(self, paths: list[str]) -> str:
        """The last MLP."""
        return [p for p in paths if p.endswith("/mlp")][-1]

    def analyze(self, layer: Any, inputs: Any) -> jax.Array:
        """fc_in of the captured input [batch, seq, d_mlp]."""
        return layer.fc_in(inputs.x)


def _device_bytes(tree: Any) -> int:
    """Bytes of `tree` held on device 0."""
    return sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree_util.tree_leaves(tree))


def _median_ms(fn: Any, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def worker(config: str) -> None:
    """In a process with the devices of one mesh: measure, then print one JSON line."""
    overrides = json.loads(config)
    with tempfile.TemporaryDirectory() as root:
        trainer = LMTrainer(overrides + [f"logging/results={root}/results"], store=f"{root}/runs")
        trainer.setup()
        batch = trainer.batch("train", 0)

        def step() -> None:
            trainer.state, metrics = trainer._train_step(trainer.state, batch)
            jax.block_until_ready(metrics)

        steps = int(next(o for o in overrides if o.startswith("training/steps=")).split("=")[1])
        step_temp = trainer._train_step.lower(trainer.state, batch).compile().memory_analysis().temp_size_in_bytes
        step_ms = _median_ms(step, steps)
        analysis = Hidden.from_trainer(trainer)
        args = (trainer.state, analysis.analysis_batch(), analysis.analysis_key())
        executable = analysis.executable(*args)
        hidden = executable(*args)
        memory = executable.memory_analysis()
        report = {
            "devices": jax.device_count(),
            "params": _device_bytes(trainer.state.params),
            "state": _device_bytes(trainer.state),
            "activation": hidden.addressable_shards[0].data.nbytes,
            "activation_shape": list(hidden.shape),
            "temp": memory.temp_size_in_bytes,
            "step_temp": step_temp,
            "step_ms": step_ms,
        }
        trainer.cleanup()
    print("REPORT " + json.dumps(report), flush=True)


def run(devices: int, overrides: list[str]) -> dict[str, Any]:
    """The worker's report, in a fresh process with `devices` CPU devices."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(overrides)], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"worker on {devices} devices failed:\n{done.stderr[-4000:]}")
    line = next(line for line in done.stdout.splitlines() if line.startswith("REPORT "))
    return json.loads(line[len("REPORT "):])


def _mib(n: int) -> str:
    return f"{n / 2**20:9.2f}"


def main() -> None:
    """Run each mesh in its own process and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3, help="timed train steps (median)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        return worker(args.worker)
    base = [f"model/d_model={args.d_model}", f"model/n_layers={args.layers}", f"training/batch_size={args.batch}",
            f"data/seq={args.seq}", f"data/examples={2 * args.batch}", f"training/steps={args.steps}",
            "optimization/warmup_steps=0"]
    print(f"Transformer d_model={args.d_model} layers={args.layers} d_mlp={4 * args.d_model} vocab=512, "
          f"batch {args.batch} x seq {args.seq}; bytes per device (MiB), device 0")
    print(f"{'mesh':32} {'params':>9} {'state':>9} {'activation':>10} {'anal.temp':>9} {'step temp':>9} "
          f"{'step ms':>8} {'step ratio':>10}")
    reference = None
    for name, devices, mesh in MESHES:
        r = run(devices, base + mesh)
        reference = reference or r
        print(f"{name:32} {_mib(r['params'])} {_mib(r['state'])} {_mib(r['activation']):>10} {_mib(r['temp'])} "
              f"{_mib(r['step_temp'])} {r['step_ms']:8.1f} {r['step_ms'] / reference['step_ms']:10.2f}", flush=True)
    print(f"activation: the last MLP's hidden layer {reference['activation_shape']}, as the forward shards it")


if __name__ == "__main__":
    main()
