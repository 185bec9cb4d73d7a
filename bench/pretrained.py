"""Loading a GPT-2-small-shaped checkpoint (124M parameters, random weights) and capturing its residual stream:
lenscope against transformers and TransformerLens on the same safetensors file.

    pip install 'torch==2.13.0+cpu' -e '.[parity,peers]'
    python bench/pretrained.py [--threads 2] [--batch 8] [--seq 128] [--repeats 5] [--folder /tmp/gpt2-random]

The checkpoint is made once with transformers (`GPT2Config()`, random weights, `save_pretrained`) and reused.
Load: each loader runs in a fresh subprocess (so no cache is shared); its peak resident memory is measured from
after the imports (the kernel's high-water mark is reset there) to the end of loading, and compared with the
checkpoint's bytes. lenscope `from_pretrained`; transformers `AutoModelForCausalLM.from_pretrained`;
TransformerLens `HookedTransformer.from_pretrained(folder, hf_model=<the transformers model>)`, which includes
loading that model (TransformerLens converts a transformers model; it does not read safetensors itself).
Capture: every block's output (the residual stream after it, kept whole) at batch x seq, timed interleaved in
one process on the same weights after checking they agree: lenscope (one jit; `record` of
`blocks/*/hook_resid_post`, what an analysis's forward runs) against TransformerLens `run_with_cache`
(no weight processing, so the same numbers) and transformers `output_hidden_states`; the plain forwards too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _peer_common import configure_threads, interleaved, load, print_table  # noqa: E402

LOADERS = ("lenscope", "transformers", "transformerlens")


def rss_kib(field: str) -> int:
    """VmRSS (now) or VmHWM (peak since the last reset) of this process, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(loader: str, folder: str, threads: int) -> None:
    """Load the checkpoint once with `loader`; print its wall time and peak RSS growth as JSON."""
    import numpy as np  # noqa: F401  (imported before the baseline, like the loaders' own imports)
    if loader == "lenscope":
        import jax
        import jax.numpy as jnp

        from lenscope.models import from_pretrained
        jnp.zeros(1).block_until_ready()  # the XLA client starts before the baseline, as torch's runtime has
    else:
        import torch
        import transformers
        torch.set_num_threads(threads)
        if loader == "transformerlens":
            from transformer_lens import HookedTransformer
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    base = rss_kib("VmRSS")
    start = time.perf_counter()
    if loader == "lenscope":
        model = from_pretrained(folder, tokenizer=False).model
        jax.block_until_ready(model)
    elif loader == "transformers":
        model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    else:
        hf = transformers.AutoModelForCausalLM.from_pretrained(folder)
        model = HookedTransformer.from_pretrained("gpt2", hf_model=hf, device="cpu", tokenizer=None)
        del hf
    seconds = time.perf_counter() - start
    print("REPORT " + json.dumps({"seconds": seconds, "peak_kib": rss_kib("VmHWM") - base,
                                  "after_kib": rss_kib("VmRSS") - base}))


REVISION = "0" * 40


def hub_layout(cache: Path) -> Path:
    """The snapshot folder of repo id `gpt2` in a Hugging Face hub cache at `cache` (refs/main names it).

    TransformerLens reads the config of an official model name through the hub cache, so the random
    checkpoint lives there, under HF_HUB_CACHE=cache with HF_HUB_OFFLINE=1; lenscope reads it as `gpt2` too.
    """
    repo = cache / "models--gpt2"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    return repo / "snapshots" / REVISION


def make_checkpoint(folder: Path) -> int:
    """The random GPT-2-small checkpoint in `folder` (made once); its safetensors bytes."""
    weights = folder / "model.safetensors"
    if not weights.is_file():
        import torch
        import transformers
        torch.manual_seed(0)
        config = transformers.GPT2Config(n_ctx=1024)  # TransformerLens 3.9 reads n_ctx, which GPT2Config dropped
        config._attn_implementation = "eager"
        transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder, safe_serialization=True)
    return weights.stat().st_size


def measure_loads(folder: Path, threads: int, repeats: int) -> dict[str, list[dict]]:
    """Each loader's reports, from `repeats` fresh subprocesses each, interleaved."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1] / "src"),
                                                                      os.environ.get("PYTHONPATH")]))}
    runs: dict[str, list[dict]] = {name: [] for name in LOADERS}
    for _ in range(repeats):
        for name in LOADERS:
            done = subprocess.run([sys.executable, __file__, "--child", name, "--folder", str(folder),
                                   "--threads", str(threads)], env=env, capture_output=True, text=True)
            if done.returncode != 0:
                print(f"{name} load failed:\n{done.stderr[-3000:]}")
                continue
            line = next(x for x in done.stdout.splitlines() if x.startswith("REPORT "))
            runs[name].append(json.loads(line[7:]))
    return runs


def print_loads(runs: dict[str, list[dict]], size: int) -> None:
    import statistics
    print(f"\nload of {size / 2**20:.0f} MiB of float32 safetensors (median of {max(map(len, runs.values()))} "
          "fresh processes)")
    print(f"{'loader':18s} {'seconds':>8s} {'x lenscope':>11s} {'peak RSS MiB':>13s} {'peak / checkpoint':>18s} "
          f"{'kept MiB':>9s}")
    ours = statistics.median(r["seconds"] for r in runs["lenscope"])
    for name, reports in runs.items():
        if not reports:
            continue
        seconds = statistics.median(r["seconds"] for r in reports)
        peak = statistics.median(r["peak_kib"] for r in reports) * 1024
        kept = statistics.median(r["after_kib"] for r in reports) * 1024
        print(f"{name:18s} {seconds:8.2f} {seconds / ours:11.2f} {peak / 2**20:13.0f} {peak / size:18.2f} "
              f"{kept / 2**20:9.0f}")


def capture(folder: Path, threads: int, batch: int, seq: int, repeats: int) -> None:
    """Interleaved forward and capture times of the three frameworks on the same weights and tokens."""
    import equinox as eqx
    import jax
    import numpy as np
    import torch
    import transformers
    from transformer_lens import HookedTransformer

    from lenscope.capture import EquinoxBackend
    from lenscope.capture.patch import record
    from lenscope.models import from_pretrained

    torch.set_num_threads(threads)
    model = from_pretrained(folder, tokenizer=False).model
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tl = HookedTransformer.from_pretrained_no_processing("gpt2", hf_model=hf, device="cpu", tokenizer=None)
    tl.eval()
    n = model.config.n_layers
    names = [f"blocks/{i}/hook_resid_post" for i in range(n)]
    tokens = np.random.default_rng(0).integers(0, model.config.vocab_size, (batch, seq)).astype(np.int32)
    torch_tokens = torch.tensor(tokens, dtype=torch.long)
    backend = EquinoxBackend()
    forward = eqx.filter_jit(lambda m, t: m(t))
    captured = eqx.filter_jit(lambda m, t: record(lambda x: m(x), (t,), names, backend=backend))
    logits, streams = captured(model, tokens)
    with torch.no_grad():
        _, cache = tl.run_with_cache(torch_tokens, names_filter=lambda name: name.endswith("hook_resid_post"))
        hidden = hf(torch_tokens, output_hidden_states=True).hidden_states
    gap_tl = max(float(np.abs(np.asarray(streams[names[i]]) - cache[f"blocks.{i}.hook_resid_post"].numpy()).max())
                 for i in range(n))
    gap_hf = max(float(np.abs(np.asarray(streams[names[i]]) - hidden[i + 1].numpy()).max()) for i in range(n - 1))
    print(f"agreement on every block's output: TransformerLens {gap_tl:.1e}, transformers {gap_hf:.1e} "
          "(max abs; transformers' last hidden state is after the final norm, so blocks 0..n-2 are compared)")

    def ours_forward():
        return jax.block_until_ready(forward(model, tokens))

    def ours_capture():
        return jax.block_until_ready(captured(model, tokens))

    def tl_forward():
        with torch.no_grad():
            return tl(torch_tokens)

    def tl_capture():
        with torch.no_grad():
            return tl.run_with_cache(torch_tokens, names_filter=lambda name: name.endswith("hook_resid_post"))

    def hf_capture():
        with torch.no_grad():
            return hf(torch_tokens, output_hidden_states=True)

    times = interleaved({"lenscope capture (one jit)": ours_capture, "TransformerLens run_with_cache": tl_capture,
                         "transformers output_hidden_states": hf_capture, "lenscope forward": ours_forward,
                         "TransformerLens forward": tl_forward}, repeats)
    print_table(f"capture of every block's residual stream, batch {batch} x seq {seq}, {n} blocks kept whole",
                times, "lenscope capture (one jit)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", choices=LOADERS, help=argparse.SUPPRESS)
    parser.add_argument("--cache", default="/tmp/lenscope-bench-hub", help="the hub cache the checkpoint is made in")
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timed capture rounds")
    parser.add_argument("--load-repeats", type=int, default=2, help="fresh processes per loader")
    args = parser.parse_args()
    threads_line = configure_threads(args.threads)
    os.environ.update(HF_HUB_CACHE=str(Path(args.cache).resolve()), HF_HUB_OFFLINE="1")
    if args.child:
        child(args.child, args.folder, args.threads)
        return
    try:
        import torch  # noqa: F401
        import transformer_lens  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as err:
        raise SystemExit(f"bench/pretrained.py compares against transformers and TransformerLens: {err}; "
                         "pip install 'torch==2.13.0+cpu' -e '.[parity,peers]'") from None
    folder = hub_layout(Path(args.cache).resolve())
    size = make_checkpoint(folder)
    print(threads_line)
    print_loads(measure_loads(folder, args.threads, args.load_repeats), size)
    capture(folder, args.threads, args.batch, args.seq, args.repeats)
    print(f"load average at the end: {load()}")


if __name__ == "__main__":
    main()
