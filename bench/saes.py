"""lenscope's SaeTrainer against SAELens' SAETrainer on identical cached activations: tokens/s, and quality
(explained variance, L0, dead latents) at the same number of tokens; then dense against gather decoding.

    pip install 'torch==2.13.0+cpu' -e '.[saelens]'
    taskset -c 1 python bench/saes.py --threads 1      # one pinned core for both (the control)
    python bench/saes.py --threads 2                   # both cores
    python bench/saes.py --d-in 256 --steps 30 --rounds 5   # one size, more tokens, more rounds
    python bench/saes.py --realistic                         # d_in 768, d_sae 16384 and 24576, k 64, 256 steps

The activations are synthetic and the same array for both: each token is a sparse sum (about 20 active) of
8 * d_in random unit directions with exponential magnitudes, plus a mean offset and noise, in float32. Both
train a TopK SAE (k=32, expansion 16, decoder rows initialized to norm 0.1, ranking by decoder norm, AuxK
weight 1, dead window 1000, Adam (--lr, default 3e-4) with betas 0.9/0.999, gradient clip 1, no
normalization) on the same batches in the same order (lenscope's ArrayData order), batch 4096 tokens.
Throughput is timed from the end of the first step (compilation, torch warm-up) to the end of the last,
in wall time and in the process's CPU time (all its threads: robust to other jobs on a shared machine);
the two trainers run in alternating rounds (lenscope, SAELens, lenscope, ...) and the table leads with each
one's median round, its min and max after it. Quality is measured on the same held-out tokens with lenscope's
SAELens-defined metrics, SAELens' SAE read back through its own saved files, after the first round; rounds
after it may train fewer steps (--timing-steps), for their throughput only.

--realistic is SAELens' sizes for a GPT-2-small residual stream: d_in 768, d_sae 16384 and 24576, TopK k 64,
batch 1024, 256 steps (262,144 tokens, enough for explained variance to mean something), lr 1e-3, feature
frequencies falling as 1 / rank (--zipf 1, as real dictionaries' densities do), then two
more interleaved rounds of 32 steps each for the median.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peer_common import configure_threads, load  # noqa: E402


def spread(values: list[float]) -> str:
    """The median of `values` first, then their min and max: 'median (min-max)'."""
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d-in", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--expansion", type=int, default=16)
    parser.add_argument("--d-sae", type=int, nargs="+", default=None,
                        help="latents (for every --d-in); default: expansion * d_in")
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=20, help="training steps of each trainer (tokens = steps * batch)")
    parser.add_argument("--lr", type=float, default=3e-4, help="Adam learning rate of both trainers")
    parser.add_argument("--eval-tokens", type=int, default=16384)
    parser.add_argument("--threads", type=int, default=2, help="torch threads; 1 also makes XLA single-threaded")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds of the decoding comparison")
    parser.add_argument("--rounds", type=int, default=3, help="alternating training runs of each trainer")
    parser.add_argument("--timing-steps", type=int, default=None,
                        help="steps of the rounds after the first (throughput only); default: --steps")
    parser.add_argument("--no-decoding", action="store_true", help="skip the dense against gather comparison")
    parser.add_argument("--zipf", type=float, default=0.0,
                        help="feature i fires with probability ~ (i + 1) ** -zipf; 0: all features alike")
    parser.add_argument("--realistic", action="store_true", help="SAELens' GPT-2-small sizes (see above)")
    args = parser.parse_args()
    if args.realistic:
        args.d_in, args.d_sae, args.k, args.batch, args.steps, args.lr = [768], [16384, 24576], 64, 1024, 256, 1e-3
        args.zipf = 1.0
        args.rounds, args.timing_steps, args.no_decoding = 3, 32, True
    return args


def activations(d_in: int, tokens: int, seed: int = 0, zipf: float = 0.0):
    """Synthetic residual-like activations [tokens, d_in]: sparse sums of unit directions, offset and noise.

    Feature i fires with probability proportional to (i + 1) ** -zipf (0: all alike), about 20 per token. The
    directions and the offset depend on d_in only, so training and held-out tokens (other seeds) share them.
    """
    import numpy as np

    model = np.random.default_rng(d_in)
    n_features = 8 * d_in
    directions = model.normal(size=(n_features, d_in)).astype(np.float32)
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    offset = model.normal(size=d_in).astype(np.float32) * 0.1
    rng = np.random.default_rng(seed)
    weights = np.arange(1, n_features + 1, dtype=np.float64) ** -zipf
    p = np.minimum(20.0 * weights / weights.sum(), 0.5)
    out = np.empty((tokens, d_in), np.float32)
    for start in range(0, tokens, 8192):
        n = min(8192, tokens - start)
        active = rng.random((n, n_features)) < p
        codes = (active * rng.exponential(1.0, (n, n_features))).astype(np.float32)
        out[start:start + n] = codes @ directions + offset + rng.normal(size=(n, d_in)).astype(np.float32) * 0.05
    return out


def clocks() -> tuple[float, float]:
    """(wall, CPU time of this process) now."""
    return time.perf_counter(), time.process_time()


def rates(marks: list[tuple[float, float]], tokens: int) -> tuple[float, float]:
    """(tokens per wall second, tokens per CPU second) between the first and the last mark."""
    (w0, c0), (w1, c1) = marks[0], marks[-1]
    return tokens / (w1 - w0), tokens / (c1 - c0)


def lenscope_run(train, held_out, args, d_sae: int, steps: int, root: Path) -> tuple[tuple[float, float], object, list]:
    """((tokens/s wall, tokens/s CPU), the trained Dictionary, the batch order) of `steps` SaeTrainer steps."""
    import jax
    import numpy as np

    from lenscope.dictionaries import Activations, SaeTrainer

    def wrap(x):
        return Activations({"acts": x}, np.arange(len(x), dtype=np.int32), np.zeros(len(x), np.int32))

    class ArraySae(SaeTrainer):
        """SaeTrainer on arrays handed to it (no model node)."""

        marks: list[tuple[float, float]] = []

        @property
        def activations(self):
            return {"train": wrap(train), "validation": wrap(held_out)}

        def tick(self):
            node = super().tick()
            if self.node.seq == 1 or self.node.seq == self.args.steps:
                jax.block_until_ready(self.state)
                self.marks.append(clocks())
            return node

    config = ["sae/sites=[acts]", "sae/architecture=topk", f"sae/k={args.k}", f"sae/d_sae={d_sae}",
              "sae/normalize_activations=none", f"training/steps={steps}", f"training/batch_size={args.batch}",
              f"optimization/lr={args.lr}", "logging/validation_interval=0", "logging/checkpoint_interval=0",
              f"logging/report_interval={steps}", "sae/eval_spliced=false", f"logging/results={root}/results"]
    ArraySae.marks = []
    trainer = ArraySae(config, store=root / "runs")
    trainer.setup()
    trainer.run()
    order = [trainer.data.indices("train", i) for i in range(steps)]
    d = trainer.dictionaries()[0]
    trainer.finish()
    trainer.cleanup()
    return rates(ArraySae.marks, (steps - 1) * args.batch), d, order


def saelens_run(train, order, args, d_in: int, d_sae: int, root: Path) -> tuple[tuple[float, float], object]:
    """((tokens/s wall, tokens/s CPU), the trained SAE as a lenscope Dictionary) of SAELens' SAETrainer."""
    import torch
    from sae_lens.config import SAETrainerConfig
    from sae_lens.saes.topk_sae import TopKTrainingSAE, TopKTrainingSAEConfig
    from sae_lens.training.sae_trainer import SAETrainer

    from lenscope.dictionaries import load_saelens

    torch.manual_seed(0)
    sae = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=d_in, d_sae=d_sae, k=args.k,
                                                aux_loss_coefficient=1.0, rescale_acts_by_decoder_norm=True,
                                                decoder_init_norm=0.1))
    marks: list[tuple[float, float]] = []

    def provider():
        for i, idx in enumerate(order):
            if i == 1:
                marks.append(clocks())
            yield torch.from_numpy(train[idx])

    cfg = SAETrainerConfig(total_training_samples=len(order) * args.batch, train_batch_size_samples=args.batch,
                           lr=args.lr, lr_end=args.lr, adam_beta1=0.9, adam_beta2=0.999, device="cpu",
                           dead_feature_window=1000)
    SAETrainer(cfg, sae, provider()).fit()
    # the step that took batch i ends when batch i + 1 is fetched; the last one ends with fit()'s loop
    marks.append(clocks())
    folder = root / "saelens"
    sae.save_inference_model(folder)
    return rates(marks, (len(order) - 1) * args.batch), load_saelens(folder)[0]


def quality(d, held_out) -> dict[str, float]:
    """Explained variance, L0 and dead latents (never firing) on the held-out tokens, SAELens' definitions."""
    import jax
    import jax.numpy as jnp

    from lenscope.dictionaries.evaluate import finish, reconstruction_sums

    x = jnp.asarray(held_out)
    metrics, _ = finish(jax.device_get(jax.jit(reconstruction_sums)(d, x, x)))
    return {k: metrics[k] for k in ("explained_variance", "l0", "dead_latents", "mse")}


def decoding(d_in: int, args) -> dict[str, float]:
    """Median ms of TopK decoding, dense (scatter then matmul) against gather (k rows), forward and with gradients."""
    import jax
    import jax.numpy as jnp

    from lenscope.dictionaries import Dictionary, Spec, init_params

    spec = Spec("topk", d_in, args.expansion * d_in, k=args.k)
    d = Dictionary.of(spec, init_params(jax.random.PRNGKey(0), spec))
    x = jax.random.normal(jax.random.PRNGKey(1), (args.batch, d_in))

    def dense(d, x):
        return jnp.sum(d(x) ** 2)

    def gather(d, x):
        values, indices = d.encode_sparse(x)
        return jnp.sum(d.decode_sparse(values, indices) ** 2)

    fns = {"dense forward": jax.jit(dense), "gather forward": jax.jit(gather),
           "dense forward+backward": jax.jit(jax.grad(dense)), "gather forward+backward": jax.jit(jax.grad(gather))}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        jax.block_until_ready(fn(d, x))
    for _ in range(args.repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            jax.block_until_ready(fn(d, x))
            times[name].append((time.perf_counter() - t) * 1e3)
    return {name: statistics.median(v) for name, v in times.items()}


def main() -> None:
    args = parse()
    threads = configure_threads(args.threads)
    try:
        import torch

        torch.set_num_threads(args.threads)
        import sae_lens  # noqa: F401
        have_peer = True
    except ImportError:
        have_peer = False
        print("sae-lens not installed (pip install 'torch==2.13.0+cpu' -e '.[saelens]'): timing lenscope alone")
    import jax

    print(threads)
    print(f"jax {jax.__version__}" + (f", torch {torch.__version__}, sae-lens {sae_lens.__version__}" if have_peer
                                      else ""))
    rows = []
    tmp = tempfile.mkdtemp(prefix="lenscope-bench-saes-")  # kept: JAX's compilation cache lives in its store
    for d_in in args.d_in:
        train = activations(d_in, args.steps * args.batch, seed=1, zipf=args.zipf)
        held_out = activations(d_in, args.eval_tokens, seed=2, zipf=args.zipf)
        for d_sae in args.d_sae or [args.expansion * d_in]:
            root = Path(tmp) / f"{d_in}x{d_sae}"
            ours, theirs, q_ours, q_theirs = [], [], None, None
            for round_ in range(args.rounds):  # alternating, so drifts of machine load fall on both
                steps = args.steps if round_ == 0 else (args.timing_steps or args.steps)
                rate, d, order = lenscope_run(train, held_out, args, d_sae, steps, root)
                ours.append(rate)
                q_ours = q_ours or quality(d, held_out)
                if have_peer:
                    rate, peer = saelens_run(train, order, args, d_in, d_sae, root)
                    theirs.append(rate)
                    q_theirs = q_theirs or quality(peer, held_out)
                print(f"d_in {d_in} d_sae {d_sae} round {round_} ({steps} steps): lenscope {ours[-1][0]:,.0f} "
                      f"tokens/s ({ours[-1][1]:,.0f} per CPU s)"
                      + (f"; SAELens {theirs[-1][0]:,.0f} ({theirs[-1][1]:,.0f})" if have_peer else "")
                      + f"; load {load()}", flush=True)
            rows.append((d_in, d_sae, ours, q_ours, theirs, q_theirs))
            print(f"d_in {d_in} d_sae {d_sae}: lenscope {q_ours}" + (f"; SAELens {q_theirs}" if have_peer else ""),
                  flush=True)
    timing = f", then {args.timing_steps} steps" if args.timing_steps and args.rounds > 1 else ""
    print(f"\nTopK SAE training, k {args.k}, batch {args.batch}, lr {args.lr}, "
          f"{args.steps} steps ({args.steps * args.batch:,} tokens; quality after them){timing}, float32, "
          f"{args.rounds} alternating rounds (median, min-max in brackets); load average after: {load()}")
    print("| d_in | d_sae | lenscope tokens/s | SAELens tokens/s | speed-up | speed-up per CPU s | EV lenscope | "
          "EV SAELens | L0 lenscope | L0 SAELens | dead lenscope | dead SAELens |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d_in, d_sae, ours, q, theirs, p in rows:
        mid, cpu = statistics.median(r[0] for r in ours), statistics.median(r[1] for r in ours)
        line = f"| {d_in} | {d_sae} | {spread([r[0] for r in ours])} | "
        if theirs:
            t_mid, t_cpu = statistics.median(r[0] for r in theirs), statistics.median(r[1] for r in theirs)
            best = max(r[0] for r in ours) / max(r[0] for r in theirs)
            line += (f"{spread([r[0] for r in theirs])} | **{mid / t_mid:.2f}x** (best {best:.2f}x) | "
                     f"{cpu / t_cpu:.2f}x | {q['explained_variance']:.3f} | {p['explained_variance']:.3f} | "
                     f"{q['l0']:.1f} | {p['l0']:.1f} | {q['dead_latents']} | {p['dead_latents']} |")
        else:
            line += (f"- | - | - | {q['explained_variance']:.3f} | - | {q['l0']:.1f} | - | "
                     f"{q['dead_latents']} | - |")
        print(line)
    if args.no_decoding:
        return
    print("\nTopK decoding of one batch, median ms (dense: scatter the k values into d_sae then matmul; "
          "gather: the k decoder rows)")
    print("| d_in | dense fwd | gather fwd | dense fwd+bwd | gather fwd+bwd | gather/dense fwd | "
          "gather/dense fwd+bwd |")
    print("|---|---|---|---|---|---|---|")
    for d_in in args.d_in:
        t = decoding(d_in, args)
        print(f"| {d_in} | {t['dense forward']:.1f} | {t['gather forward']:.1f} | {t['dense forward+backward']:.1f} | "
              f"{t['gather forward+backward']:.1f} | {t['gather forward'] / t['dense forward']:.2f} | "
              f"{t['gather forward+backward'] / t['dense forward+backward']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
