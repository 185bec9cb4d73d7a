"""TransformerLens' calls on a loaded model (run_with_cache, run_with_hooks, generate): lenscope against
TransformerLens on the same GPT-2-small-shaped weights.

    pip install 'torch==2.13.0+cpu' -e '.[parity,peers]'
    python bench/facade.py [--rounds 3] [--threads 2] [--batches 1,8] [--seq 128] [--rows cache,resid,hooks,generate]
    python bench/facade.py --quick                 # a smoke run: 2 layers, d_model 64

A random checkpoint (12 layers, d_model 768, 12 heads, vocab 50257, n_ctx 1024) is made with transformers'
GPT2LMHeadModel and saved to a temporary folder; lenscope loads it with `from_pretrained`, TransformerLens
builds a HookedTransformer from a config and `convert_gpt2_weights` of the same model (no weight processing, as
tests/test_pretrained_cache.py does). Rows, each at every batch of --batches and --seq positions:
  cache     run_with_cache(), every default hook
  resid     run_with_cache(names_filter=<every hook_resid_post>)
  hooks     run_with_hooks with one zero-ablation (head 3 of blocks.5.attn.hook_z)
  generate  32 new tokens, greedy (TransformerLens: do_sample=False, use_past_kv_cache=True), no stop at EOS
Each row's first call is timed alone (lenscope's includes tracing and compiling its program for that shape: lenscope
gets a fresh compile-cache folder per run, so a second run does not time a cache load) and
its results are checked to agree (logits within 1e-4 of their scale; generate: the tokens) before the warm
median of --rounds interleaved rounds (bench/_peer_common.interleaved). JAX outputs are synchronized with
block_until_ready; TransformerLens runs under torch.inference_mode (its fastest). Ratios are TL / lenscope.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _peer_common import agree, configure_threads, interleaved, load  # noqa: E402

ROWS = {"cache": "run_with_cache, every default hook", "resid": "run_with_cache, resid_post only",
        "hooks": "run_with_hooks, one head zeroed", "generate": "generate 32 tokens, greedy"}
NEW_TOKENS = 32


@dataclass(frozen=True)
class Sizes:
    """The GPT-2 checkpoint's shape (GPT-2 small by default)."""

    layers: int = 12
    d_model: int = 768
    heads: int = 12
    vocab: int = 50257
    n_ctx: int = 1024

    def describe(self) -> str:
        """One line of the shape."""
        return (f"GPT-2 shape: {self.layers} layers, d_model {self.d_model}, {self.heads} heads, vocab {self.vocab}, "
                f"n_ctx {self.n_ctx}, float32, random weights")


QUICK = Sizes(layers=2, d_model=64, heads=4, vocab=1000, n_ctx=1024)


@dataclass
class Row:
    """One measured row: first-call seconds and warm milliseconds of both sides."""

    name: str
    batch: int
    first: dict[str, float]
    warm: dict[str, list[float]]
    check: str


def parse() -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timed rounds (medians are printed)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads; 1 also makes XLA single-threaded")
    parser.add_argument("--quick", action="store_true", help="a small model (2 layers, d_model 64) for a smoke run")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {','.join(ROWS)}")
    parser.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    parser.add_argument("--seq", type=int, default=128, help="prompt positions")
    args = parser.parse_args()
    unknown = set(args.rows.split(",")) - set(ROWS)
    if unknown:
        parser.error(f"unknown rows {sorted(unknown)}; choose from {','.join(ROWS)}")
    return args


def make_checkpoint(sizes: Sizes, folder: Path) -> Any:
    """The transformers GPT2LMHeadModel (eval mode) of random weights, saved to `folder`."""
    import torch
    import transformers
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=sizes.layers, n_embd=sizes.d_model, n_head=sizes.heads,
                                     vocab_size=sizes.vocab, n_positions=sizes.n_ctx, n_ctx=sizes.n_ctx,
                                     bos_token_id=sizes.vocab - 1, eos_token_id=sizes.vocab - 1)
    config._attn_implementation = "eager"
    hf = transformers.GPT2LMHeadModel(config).eval()
    hf.save_pretrained(folder, safe_serialization=True)
    return hf


def lens_model(hf: Any) -> Any:
    """TransformerLens' HookedTransformer on `hf`'s weights (no weight processing)."""
    import transformer_lens as lens
    from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights
    c = hf.config
    cfg = lens.HookedTransformerConfig(n_layers=c.n_layer, d_model=c.n_embd, n_ctx=c.n_positions,
                                       d_head=c.n_embd // c.n_head, n_heads=c.n_head, d_vocab=c.vocab_size,
                                       d_mlp=4 * c.n_embd, act_fn="gelu_new", normalization_type="LN",
                                       eps=c.layer_norm_epsilon, device="cpu")
    tl = lens.HookedTransformer(cfg)
    tl.load_state_dict(convert_gpt2_weights(hf, cfg), strict=False)
    return tl.eval()


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of one call."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def gap_of_caches(ours: Any, theirs: Any) -> float:
    """The largest gap over the hooks both caches hold (TransformerLens' hook_normalized is before the norm's
    affine map, so it is left out; masked attention scores are -inf there and compared where finite)."""
    worst = 0.0
    for name in ours:
        if name.endswith("hook_normalized") or name not in theirs:
            continue
        want, got = theirs[name].numpy(), np.asarray(ours[name])
        finite = np.isfinite(want)
        scale = max(1.0, float(np.abs(want[finite]).max()))
        worst = max(worst, agree(name, got[finite], want[finite], 1e-4 * scale) / scale)
    return worst


class Sides:
    """Both models on the same weights and the calls of every row, as (lenscope, TransformerLens) functions."""

    def __init__(self, sizes: Sizes, threads: int, folder: Path) -> None:
        import torch

        from lenscope.models import from_pretrained
        torch.set_num_threads(threads)
        self.torch = torch
        hf = make_checkpoint(sizes, folder)
        self.ours = from_pretrained(folder, tokenizer=False)
        self.tl = lens_model(hf)
        self.layer = min(5, sizes.layers - 1)
        self.head = min(3, sizes.heads - 1)
        self.vocab = sizes.vocab
        self.resid = [f"blocks.{i}.hook_resid_post" for i in range(sizes.layers)]

    def tokens(self, batch: int, seq: int) -> tuple[np.ndarray, Any]:
        """Random ids [batch, seq] as NumPy (lenscope) and as a torch tensor (TransformerLens)."""
        ids = np.random.default_rng(batch).integers(0, self.vocab, (batch, seq)).astype(np.int32)
        return ids, self.torch.tensor(ids, dtype=self.torch.long)

    def calls(self, row: str, ids: np.ndarray, tids: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
        """The row's lenscope call (blocking on its outputs) and TransformerLens call."""
        import jax
        torch, ours, tl = self.torch, self.ours, self.tl
        name = f"blocks.{self.layer}.attn.hook_z"
        head = self.head

        def zero_head(z: Any, hook: Any) -> Any:  # defined once: its program is compiled once per shape
            return z.at[:, :, head].set(0.0)

        def tl_zero_head(z: Any, hook: Any) -> Any:
            z[:, :, head] = 0.0
            return z

        def cached(names: Any) -> Callable[[], Any]:
            def run() -> Any:
                logits, cache = ours.run_with_cache(ids, names_filter=names)
                jax.block_until_ready((logits, list(cache.values())))
                return logits, cache
            return run

        def inference(fn: Callable[[], Any]) -> Callable[[], Any]:
            def run() -> Any:
                with torch.inference_mode():
                    return fn()
            return run

        if row == "cache":
            return cached(None), inference(lambda: tl.run_with_cache(tids))
        if row == "resid":
            return cached(self.resid), inference(lambda: tl.run_with_cache(tids, names_filter=self.resid))
        if row == "hooks":
            return (lambda: jax.block_until_ready(ours.run_with_hooks(ids, fwd_hooks=[(name, zero_head)])),
                    inference(lambda: tl.run_with_hooks(tids, fwd_hooks=[(name, tl_zero_head)])))
        return (lambda: ours.generate(ids, NEW_TOKENS, temperature=0.0, stop_at_eos=False),
                inference(lambda: tl.generate(tids, max_new_tokens=NEW_TOKENS, do_sample=False,
                                              use_past_kv_cache=True, stop_at_eos=False, verbose=False)))


def compare(row: str, ours: Any, theirs: Any) -> str:
    """How the first calls' results agree (SystemExit when the logits differ: not the same work)."""
    if row == "generate":  # greedy paths may part at a near-tie later (TL's KV-cache path parts from its own
        prompt = ours.shape[1] - NEW_TOKENS  # cache-free path too), so the first new token must agree, not all
        new, want = np.asarray(ours)[:, prompt:], theirs.numpy()[:, prompt:]
        if not (new[:, 0] == want[:, 0]).all():
            raise SystemExit(f"generate: first new tokens differ: {new[:, 0]} vs {want[:, 0]}")
        return f"first new tokens equal, all new tokens equal {int((new == want).sum())}/{new.size}"
    ours_logits, theirs_logits = (ours[0], theirs[0]) if row in ("cache", "resid") else (ours, theirs)
    want = theirs_logits.numpy()
    scale = max(1.0, float(np.abs(want).max()))
    line = f"logits gap {agree(row, np.asarray(ours_logits), want, 1e-4 * scale):.1e}"
    if row in ("cache", "resid"):
        line += f", cache gap {gap_of_caches(ours[1], theirs[1]):.1e} (rel.)"
    return line


def measure(sides: Sides, row: str, batch: int, seq: int, rounds: int) -> Row:
    """First calls (lenscope then TransformerLens), the agreement check, then the interleaved warm rounds."""
    ids, tids = sides.tokens(batch, seq)
    ours, theirs = sides.calls(row, ids, tids)
    first_ours, out_ours = timed(ours)
    first_theirs, out_theirs = timed(theirs)
    check = compare(row, out_ours, out_theirs)
    del out_ours, out_theirs
    warm = interleaved({"lenscope": ours, "TransformerLens": theirs}, rounds, warmup=0)
    result = Row(row, batch, {"lenscope": first_ours, "TransformerLens": first_theirs}, warm, check)
    print(f"  {ROWS[row]}, batch {batch}: {check}; load {load()}", flush=True)
    return result


def meets(row: Row) -> str:
    """The goal: >= 2x TransformerLens warm; at batch 8 also a first call no slower than TransformerLens' first."""
    warm = ratio(row.warm) >= 2.0
    first = row.batch != 8 or row.first["lenscope"] <= row.first["TransformerLens"]
    return "yes" if warm and first else "no (" + ", ".join(
        why for why, bad in (("warm < 2x", not warm), ("first call slower", not first)) if bad) + ")"


def ratio(warm: dict[str, list[float]]) -> float:
    """TransformerLens' warm median over lenscope's."""
    return statistics.median(warm["TransformerLens"]) / statistics.median(warm["lenscope"])


def print_rows(rows: list[Row], seq: int, rounds: int) -> None:
    """The table, as Markdown: first calls in s, warm medians in ms, the ratio TL / lenscope, the goal."""
    print(f"\nseq {seq}; first call s (lenscope's includes compiling), warm median ms of {rounds} interleaved rounds; "
          "x = TransformerLens / lenscope")
    print("| call | batch | lenscope first s | TL first s | first x | lenscope warm ms | TL warm ms | warm x | goal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ours, theirs = r.first["lenscope"], r.first["TransformerLens"]
        print(f"| {ROWS[r.name]} | {r.batch} | {ours:.2f} | {theirs:.2f} | {theirs / ours:.2f} | "
              f"{statistics.median(r.warm['lenscope']):.1f} | {statistics.median(r.warm['TransformerLens']):.1f} | "
              f"{ratio(r.warm):.2f} | {meets(r)} |")


def forward_gflop(sizes: Sizes, batch: int, seq: int) -> float:
    """Multiply-adds x 2 of one forward: every block's matrices, attention over the sequence, and the unembedding."""
    d, mlp = sizes.d_model, 4 * sizes.d_model
    per_token = sizes.layers * (2 * (4 * d * d + 2 * d * mlp) + 4 * seq * d) + 2 * d * sizes.vocab
    return batch * seq * per_token / 1e9


def matmul_ceiling() -> float:
    """GFLOP/s of one compiled float32 2048x2048 matmul, best of 5: what this CPU's cores deliver on plain GEMM."""
    import jax
    import jax.numpy as jnp

    a = jnp.asarray(np.random.default_rng(0).random((2048, 2048)), jnp.float32)
    square = jax.jit(lambda x: x @ x)
    square(a).block_until_ready()
    best = min(timed(lambda: square(a).block_until_ready())[0] for _ in range(5))
    return 2 * 2048**3 / best / 1e9


def print_rates(rows: list[Row], sizes: Sizes, seq: int) -> None:
    """Each forward row's arithmetic rate on both sides beside the matmul ceiling: how far 2x could go."""
    ceiling = matmul_ceiling()
    print(f"\narithmetic: a float32 2048x2048 matmul runs at {ceiling:.0f} GFLOP/s here")
    for r in rows:
        if r.name == "generate":
            continue
        work = forward_gflop(sizes, r.batch, seq)
        ours, theirs = (work / (statistics.median(r.warm[side]) / 1e3) for side in ("lenscope", "TransformerLens"))
        print(f"  {ROWS[r.name]}, batch {r.batch}: {work:.2f} GFLOP; lenscope {ours:.0f} GFLOP/s "
              f"({ours / ceiling:.0%} of the matmul rate), TransformerLens {theirs:.0f} GFLOP/s; 2x TransformerLens "
              f"would take {2 * theirs:.0f} GFLOP/s")


def fresh_compile_cache() -> str:
    """An empty compile-cache folder for lenscope ($LENSCOPE_COMPILE_CACHE, set before JAX is imported), removed at
    exit: the first-call rows then time a first call (tracing and compiling), never a load from an earlier run's
    cache in the user's folder."""
    folder = tempfile.mkdtemp(prefix="lenscope-facade-cache-")
    os.environ["LENSCOPE_COMPILE_CACHE"] = folder
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def main() -> None:
    """Build both models, measure every chosen row at every batch, print the table."""
    args = parse()
    threads = configure_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cache = fresh_compile_cache()
    try:  # lazy: the thread flags must be set before JAX and torch are imported
        import jax
        import torch
    except ImportError as err:
        raise SystemExit(f"bench/facade.py needs torch, transformers and transformer-lens: {err}; "
                         "pip install 'torch==2.13.0+cpu' -e '.[parity,peers]'") from None
    sizes = QUICK if args.quick else Sizes()
    print(f"{sizes.describe()}\n{threads}\nlenscope's compile cache: {cache} (fresh, removed at exit)")
    with tempfile.TemporaryDirectory(prefix="lenscope-facade-") as folder:  # both models hold the weights read
        sides = Sides(sizes, args.threads, Path(folder))
    print(f"jax {jax.__version__}, torch {torch.__version__} (torch.get_num_threads() {torch.get_num_threads()}), "
          f"transformer-lens {version('transformer-lens')}, transformers {version('transformers')}")
    rows = [measure(sides, row, batch, args.seq, args.rounds)
            for batch in map(int, args.batches.split(",")) for row in args.rows.split(",")]
    print_rows(rows, args.seq, args.rounds)
    print_rates(rows, sizes, args.seq)
    print(f"load average at the end: {load()}")


if __name__ == "__main__":
    main()
