"""The tutorials' loops as they are written, lenscope against TransformerLens on the same weights.

    pip install 'torch==2.13.0+cpu' -e '.[parity,peers]'
    python bench/tutorial_loops.py [--rounds 3] [--quick]

A random GPT-2 (4 layers; transformers' GPT2LMHeadModel, saved once) is loaded by both without weight processing:
lenscope with `from_pretrained_no_processing`, TransformerLens with `convert_gpt2_weights`. Each part runs in fresh
child processes, once pinned to one core (XLA: no Eigen threads, intra-op 1; torch: 1 thread) and once at 2
threads, and prints the load average:

  loops    the Exploratory Analysis Demo's residual patching sweep (a new `partial(patch, pos=p)` per call,
           layers x positions), its head sweep (`partial(patch_head, head_index=h)`, layers x heads), ARENA's
           head-ablation loss loop, and SAELens' steering loop (globals `coeff`, `steering_vector`). Each loop
           is timed whole: its first round (lenscope's first call answers op by op while the program compiles)
           and the warm median of the next rounds, interleaved. Results must agree (1e-4).
  new hook the first call of a hook function never seen before, in a warm process (a new code object each round).
  utils    ActivationCache's accumulated_resid, decompose_resid and stack_head_results.
  fresh    a fresh process's first run_with_cache after loading (lenscope with an empty compile cache).
Ratios are TransformerLens' time / lenscope's (above 1: lenscope faster).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _peer_common import configure_threads, load  # noqa: E402

LAYERS, D_MODEL, HEADS, VOCAB, SEQ, BATCH = 4, 256, 8, 2000, 15, 8
QUICK = dict(LAYERS=2, D_MODEL=64, HEADS=4, VOCAB=200, SEQ=8, BATCH=2)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a smoke run on a tiny model")
    parser.add_argument("--child", choices=["loops", "fresh-lenscope", "fresh-tl"], help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    return parser.parse_args()


def make_checkpoint(folder: Path) -> None:
    import torch
    import transformers
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=LAYERS, n_embd=D_MODEL, n_head=HEADS, vocab_size=VOCAB,
                                     n_positions=64, n_ctx=64, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)
    config._attn_implementation = "eager"
    transformers.GPT2LMHeadModel(config).eval().save_pretrained(folder, safe_serialization=True)


def lens_model(folder: Path) -> Any:
    """TransformerLens on the saved checkpoint's weights, built as bench/facade.py builds it (no processing)."""
    import transformers
    from facade import lens_model as from_hf  # lazy: facade's module imports nothing heavy, but only children need it
    return from_hf(transformers.GPT2LMHeadModel.from_pretrained(folder).eval())


# -- the tutorials' hooks, each side written as its tutorial writes it --------------------------------------------
def tl_patch_residual(resid, hook, pos, clean_cache):
    resid[:, pos, :] = clean_cache[hook.name][:, pos, :]
    return resid


def ls_patch_residual(resid, hook, pos, clean_cache):
    return resid.at[:, pos, :].set(clean_cache[hook.name][:, pos, :])


def tl_patch_head(z, hook, head_index, clean_cache):
    z[:, :, head_index, :] = clean_cache[hook.name][:, :, head_index, :]
    return z


def ls_patch_head(z, hook, head_index, clean_cache):
    return z.at[:, :, head_index, :].set(clean_cache[hook.name][:, :, head_index, :])


def tl_ablate(v, hook, head_index_to_ablate):
    v[:, :, head_index_to_ablate, :] = 0.0
    return v


def ls_ablate(v, hook, head_index_to_ablate):
    return v.at[:, :, head_index_to_ablate, :].set(0.0)


coeff = 0.0
steering_vector: Any = None


def steering_hook(resid, hook):  # SAELens' idiom: both globals (a torch or a JAX array, per side)
    return resid + coeff * steering_vector


class Loops:
    """Both sides' models, prompts and clean caches, and each loop as a function of the side."""

    def __init__(self, folder: Path) -> None:
        import torch

        from lenscope.models import from_pretrained_no_processing as from_pretrained
        self.torch = torch
        self.ls = from_pretrained(folder, tokenizer=False)
        self.tl = lens_model(folder)
        rng = np.random.default_rng(0)
        self.clean = rng.integers(0, VOCAB, (BATCH, SEQ))
        self.corrupt = self.clean.copy()
        self.corrupt[:, SEQ // 2] = rng.integers(0, VOCAB, BATCH)
        with torch.inference_mode():
            _, self.tl_cache = self.tl.run_with_cache(torch.tensor(self.clean))
        _, self.ls_cache = self.ls.run_with_cache(self.clean)
        self.vectors = rng.normal(size=(2, D_MODEL)).astype(np.float32)

    def tl_run(self, hooks: list, return_type: str = "logits") -> np.ndarray:
        with self.torch.inference_mode():
            out = self.tl.run_with_hooks(self.torch.tensor(self.corrupt), fwd_hooks=hooks, return_type=return_type)
        return out[:, -1].numpy() if return_type == "logits" else np.asarray(float(out))

    def ls_run(self, hooks: list, return_type: str = "logits") -> np.ndarray:
        out = self.ls.run_with_hooks(self.corrupt, fwd_hooks=hooks, return_type=return_type)
        return np.asarray(out[:, -1] if return_type == "logits" else out)

    def residual(self, side: str) -> np.ndarray:
        fn, run, cache = self._side(side, tl_patch_residual, ls_patch_residual)
        return np.stack([run([(f"blocks.{layer}.hook_resid_pre", functools.partial(fn, pos=pos, clean_cache=cache))])
                         for layer in range(LAYERS) for pos in range(SEQ)])

    def heads(self, side: str) -> np.ndarray:
        fn, run, cache = self._side(side, tl_patch_head, ls_patch_head)
        return np.stack([run([(f"blocks.{layer}.attn.hook_z", functools.partial(fn, head_index=h, clean_cache=cache))])
                         for layer in range(LAYERS) for h in range(4)])

    def ablation(self, side: str) -> np.ndarray:
        fn, run, _ = self._side(side, tl_ablate, ls_ablate)
        return np.stack([run([(f"blocks.{layer}.attn.hook_v", functools.partial(fn, head_index_to_ablate=h))],
                             "loss") for layer in range(LAYERS) for h in range(HEADS)])

    def steering(self, side: str) -> np.ndarray:
        global coeff, steering_vector
        _, run, _ = self._side(side, None, None)
        out = []
        for vector in self.vectors:
            steering_vector = self.torch.tensor(vector) if side == "tl" else vector
            for coeff in (0.0, 1.0, 2.0, 5.0):  # noqa: B007 (the hook reads the global)
                out.append(run([("blocks.1.hook_resid_post", steering_hook)], "loss"))
        return np.stack(out)

    def _side(self, side: str, tl_fn: Any, ls_fn: Any) -> tuple:
        return (tl_fn, self.tl_run, self.tl_cache) if side == "tl" else (ls_fn, self.ls_run, self.ls_cache)

    def new_hook(self, side: str, serial: int) -> float:
        """Seconds of the first call of a hook function whose code was never seen (exec'd fresh)."""
        scope: dict[str, Any] = {}
        body = "z[:, :, 1] = 0.0\n    return z" if side == "tl" else f"return z.at[:, :, 1].set(0.0 * {serial})"
        exec(f"def hook_{serial}(z, hook):\n    {body}\n", scope)  # noqa: S102 (a new code object)
        run = self.tl_run if side == "tl" else self.ls_run
        start = time.perf_counter()
        run([(f"blocks.{LAYERS - 1}.attn.hook_z", scope[f"hook_{serial}"])])
        return time.perf_counter() - start

    def utilities(self, side: str) -> None:
        cache = self.tl_cache if side == "tl" else self.ls_cache
        with self.torch.inference_mode():
            for out in (cache.accumulated_resid(layer=-1, incl_mid=True, apply_ln=True),
                        cache.decompose_resid(layer=-1, return_labels=True)[0],
                        cache.stack_head_results(layer=-1, return_labels=True)[0]):
                np.asarray(out)


def timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def loops_child(folder: Path, rounds: int) -> dict[str, Any]:
    """Every loop, new hook and utility on both sides, interleaved; seconds."""
    loops = Loops(folder)
    result: dict[str, Any] = {}
    for name in ("residual", "heads", "ablation", "steering"):
        loop = getattr(loops, name)
        first_ls, ours = timed(lambda loop=loop: loop("ls"))
        first_tl, theirs = timed(lambda loop=loop: loop("tl"))
        gap = float(np.max(np.abs(ours - theirs)))
        if gap > 1e-4 * max(1.0, float(np.max(np.abs(theirs)))):
            raise SystemExit(f"{name}: lenscope and TransformerLens differ by {gap:.2e}")
        warm: dict[str, list[float]] = {"ls": [], "tl": []}
        for _ in range(rounds):
            for side in ("tl", "ls"):
                warm[side].append(timed(lambda loop=loop, side=side: loop(side))[0])
        runs = len(ours)
        result[name] = {"runs": runs, "first": {"ls": first_ls, "tl": first_tl},
                        "warm": {s: statistics.median(v) for s, v in warm.items()}, "gap": gap,
                        "programs": loops.ls._hooked.programs.compiles}
    new = {"ls": [], "tl": []}
    for serial in range(rounds + 2):
        for side in ("tl", "ls"):
            new[side].append(loops.new_hook(side, serial))
    result["new hook"] = {s: statistics.median(v) for s, v in new.items()}
    utils = {"ls": [], "tl": []}
    for side in ("tl", "ls"):
        loops.utilities(side)
    for _ in range(max(rounds, 5)):
        for side in ("tl", "ls"):
            utils[side].append(timed(lambda side=side: loops.utilities(side))[0])
    result["utils"] = {s: statistics.median(v) for s, v in utils.items()}
    return result


def fresh_child(folder: Path, side: str) -> dict[str, float]:
    """A fresh process: seconds to load, and of the first run_with_cache."""
    start = time.perf_counter()
    if side == "lenscope":
        from lenscope.models import from_pretrained_no_processing as from_pretrained
        model = from_pretrained(folder, tokenizer=False)
        loaded = time.perf_counter()
        logits, cache = model.run_with_cache(np.arange(SEQ)[None] % VOCAB)
        np.asarray(logits)
    else:
        import torch
        model = lens_model(folder)
        loaded = time.perf_counter()
        with torch.inference_mode():
            logits, cache = model.run_with_cache(torch.arange(SEQ)[None] % VOCAB)
    done = time.perf_counter()
    return {"load": loaded - start, "first": done - loaded}


def child(args: argparse.Namespace, *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    command = [sys.executable, __file__, "--folder", args.folder, "--threads", str(args.threads),
               "--rounds", str(args.rounds), *(["--quick"] if args.quick else []), *extra]
    done = subprocess.run(command, capture_output=True, text=True, env=env or os.environ.copy(), check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(extra)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(threads: int, loops: dict[str, Any], fresh: dict[str, dict[str, float]]) -> None:
    print(f"\n== {threads} thread(s), load average {load()}")
    print(f"{'loop':28s} {'runs':>5s} {'TL warm s':>10s} {'ls warm s':>10s} {'x (warm)':>9s} {'TL 1st s':>9s} "
          f"{'ls 1st s':>9s} {'x (1st)':>8s} {'programs':>9s}")
    for name in ("residual", "heads", "ablation", "steering"):
        row = loops[name]
        warm, first = row["warm"], row["first"]
        print(f"{name:28s} {row['runs']:5d} {warm['tl']:10.3f} {warm['ls']:10.3f} {warm['tl'] / warm['ls']:9.2f} "
              f"{first['tl']:9.3f} {first['ls']:9.3f} {first['tl'] / first['ls']:8.2f} {row['programs']:9d}")
    new, utils = loops["new hook"], loops["utils"]
    print(f"{'first call of a new hook':28s} {'':5s} {new['tl']:10.4f} {new['ls']:10.4f} {new['tl'] / new['ls']:9.2f}")
    print(f"{'cache utilities (3 calls)':28s} {'':5s} {utils['tl']:10.4f} {utils['ls']:10.4f} "
          f"{utils['tl'] / utils['ls']:9.2f}")
    tl, ls = fresh["tl"], fresh["lenscope"]
    print(f"{'fresh process run_with_cache':28s} {'':5s} {tl['first']:10.3f} {ls['first']:10.3f} "
          f"{tl['first'] / ls['first']:9.2f}   (load: TL {tl['load']:.2f} s, lenscope {ls['load']:.2f} s)")


def main() -> None:
    args = parse()
    if args.quick:
        globals().update(QUICK)
    if args.child:
        configure_threads(args.threads)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch  # lazy: after the thread settings
        torch.set_num_threads(args.threads)
        folder = Path(args.folder)
        out = loops_child(folder, args.rounds) if args.child == "loops" else \
            fresh_child(folder, args.child.removeprefix("fresh-"))
        print(json.dumps(out))
        return
    with tempfile.TemporaryDirectory(prefix="lenscope-loops-") as folder:
        make_checkpoint(Path(folder))
        args.folder = folder
        print(f"GPT-2 of {LAYERS} layers, d_model {D_MODEL}, {HEADS} heads, vocab {VOCAB}; prompts {BATCH} x {SEQ}; "
              f"rounds {args.rounds}")
        for threads in (1, 2):
            args.threads = threads
            loops = child(args, "--child", "loops")
            fresh = {}
            for side in ("tl", "lenscope"):
                env = {**os.environ, "LENSCOPE_COMPILE_CACHE": tempfile.mkdtemp(prefix="lenscope-fresh-cache-")}
                fresh[side] = child(args, "--child", f"fresh-{side}", env=env)
            report(threads, loops, fresh)


if __name__ == "__main__":
    main()
