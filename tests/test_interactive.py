"""Hooked calls have eager semantics at compiled speed (P7): what a hook reads from outside its arguments is an
argument of the program or part of its key, so a changed global, closure or partial argument is never met by a
stale program, and a loop written the tutorial way compiles one program. Each case is compared with
TransformerLens on the same weights."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from analysis_probes import config  # noqa: E402
from hf_models import checkpoint, save_tokenizer, transformerlens_gpt2  # noqa: E402

from lenscope.analysis import AnalysisBase  # noqa: E402
from lenscope.errors import UsageError  # noqa: E402
from lenscope.examples.grokking import GrokTrainer  # noqa: E402
from lenscope.models import from_pretrained_no_processing  # noqa: E402

IDS = np.random.default_rng(0).integers(4, 50, (2, 6))
HEAD = 0  # read by zero_head: the tutorials' global
COEFF, STEER = 0.0, np.zeros(32, np.float32)
MODE = "zero"


@pytest.fixture(scope="module")
def loaded():
    pytest.importorskip("torch", reason="pip install 'torch==2.13.0+cpu' -e '.[parity,peers]'")
    _, folder = checkpoint("gpt2")
    save_tokenizer(folder)
    return folder, from_pretrained_no_processing(folder)


@pytest.fixture(scope="module")
def lens(loaded, tmp_path_factory):
    return transformerlens_gpt2(loaded[1], tmp_path_factory.mktemp("lens"))


@pytest.fixture
def model(loaded):
    model = loaded[1]
    model.eager_first = False  # compile, then answer: the compile counts below are exact
    model.reset_hooks()
    return model


def tl_loss(lens, hooks):
    import torch

    with torch.no_grad():
        return float(lens.run_with_hooks(torch.tensor(IDS), fwd_hooks=hooks, return_type="loss"))


def tl_zero_head(head):
    def hook(z, hook):
        z = z.clone()
        z[:, :, head] = 0.0
        return z
    return hook


def zero_head(z, hook):
    return z.at[:, :, HEAD].set(0.0)


def loss(model, hooks):
    return float(model.run_with_hooks(IDS, fwd_hooks=hooks, return_type="loss"))


def test_a_global_scalar_changed_between_calls_is_read_at_call_time_by_one_program(model, lens) -> None:
    global HEAD
    compiles = model._hooked.programs.compiles
    got, want = [], []
    for HEAD in range(4):  # noqa: B007 (the hook reads the global)
        got.append(loss(model, [("blocks.0.attn.hook_z", zero_head)]))
        want.append(tl_loss(lens, [("blocks.0.attn.hook_z", tl_zero_head(HEAD))]))
    HEAD = 0
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert len(set(np.round(got, 6))) == 4  # four different answers, not the first one four times
    assert model._hooked.programs.compiles == compiles + 1


def steer(resid, hook):
    return resid + COEFF * STEER


def test_a_replaced_global_array_and_a_changed_coefficient_steer_as_transformerlens(model, lens) -> None:
    import torch

    global COEFF, STEER
    compiles = model._hooked.programs.compiles
    got, want = [], []
    rng = np.random.default_rng(5)
    for vector in rng.normal(size=(2, 32)).astype(np.float32):  # (a constant vector the next norm would remove)
        STEER = vector  # the global array replaced
        tensor = torch.tensor(vector)
        for COEFF in (0.0, 1.0, 5.0):  # noqa: B007

            def tl_steer(resid, hook, c=COEFF, v=tensor):
                return resid + c * v
            got.append(loss(model, [("blocks.0.hook_resid_post", steer)]))
            want.append(tl_loss(lens, [("blocks.0.hook_resid_post", tl_steer)]))
    COEFF, STEER = 0.0, np.zeros(32, np.float32)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert len(set(np.round(got, 6))) == 5  # coefficient 0 is the same for both vectors
    assert model._hooked.programs.compiles == compiles + 1


def test_closures_made_in_a_loop_and_partials_per_position_compile_once(model, lens) -> None:
    import torch

    def make(head):
        def hook(z, hook):
            return z.at[:, :, head].set(0.0)
        return hook

    compiles = model._hooked.programs.compiles
    got = [loss(model, [("blocks.1.attn.hook_z", make(h))]) for h in range(4)]
    want = [tl_loss(lens, [("blocks.1.attn.hook_z", tl_zero_head(h))]) for h in range(4)]
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert model._hooked.programs.compiles == compiles + 1

    _, clean = model.run_with_cache(IDS[::-1].copy(), names_filter="blocks.0.hook_resid_pre")
    source = np.asarray(clean["blocks.0.hook_resid_pre"])

    def patch(resid, hook, pos):
        return resid.at[:, pos].set(source[:, pos])

    def tl_patch(resid, hook, pos):
        resid = resid.clone()
        resid[:, pos] = torch.tensor(source[:, pos])
        return resid

    compiles = model._hooked.programs.compiles
    got = [loss(model, [("blocks.0.hook_resid_pre", functools.partial(patch, pos=p))]) for p in range(6)]
    want = [tl_loss(lens, [("blocks.0.hook_resid_pre", functools.partial(tl_patch, pos=p))]) for p in range(6)]
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert model._hooked.programs.compiles == compiles + 1


def test_hooks_context_with_a_changed_global(model, lens) -> None:
    global HEAD
    compiles = model._hooked.programs.compiles
    got, want = [], []
    with model.hooks(fwd_hooks=[("blocks.1.attn.hook_z", zero_head)]):
        for HEAD in (3, 1):  # noqa: B007
            got.append(float(model(IDS, return_type="loss")))
            want.append(tl_loss(lens, [("blocks.1.attn.hook_z", tl_zero_head(HEAD))]))
    HEAD = 0
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert model._hooked.programs.compiles == compiles + 1


def by_mode(x, hook):
    if MODE == "zero":  # a string in Python control flow: part of the program's key
        return x * 0.0
    return x * 2.0


def upto(x, hook, pos):
    return x.at[:, :pos].set(0.0)  # a slice bound must be concrete: the number joins the key for this call


def test_values_needed_concretely_recompile_and_answer_right(model, lens) -> None:
    import torch

    global MODE
    got = []
    for MODE in ("zero", "double", "zero"):  # noqa: B007
        got.append(loss(model, [("blocks.0.hook_mlp_out", by_mode)]))
    MODE = "zero"
    want_zero = tl_loss(lens, [("blocks.0.hook_mlp_out", lambda x, hook: x * 0.0)])
    want_double = tl_loss(lens, [("blocks.0.hook_mlp_out", lambda x, hook: x * 2.0)])
    np.testing.assert_allclose(got, [want_zero, want_double, want_zero], atol=1e-5)

    def tl_upto(x, hook, pos):
        x = x.clone()
        x[:, :pos] = 0.0
        return x
    got = [loss(model, [("blocks.0.hook_resid_post", functools.partial(upto, pos=p))]) for p in (1, 3, 1)]
    want = [tl_loss(lens, [("blocks.0.hook_resid_post", functools.partial(tl_upto, pos=p))]) for p in (1, 3, 1)]
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert got[0] != got[1]
    del torch


def test_side_effects_run_eagerly_as_written_and_save_returns_values(model, capsys) -> None:
    _, cache = model.run_with_cache(IDS, names_filter="blocks.*.attn.hook_pattern")
    store = np.zeros((2, 4))

    def score(pattern, hook):  # ARENA's idiom: write into an outside array
        store[hook.layer()] = pattern.diagonal(axis1=-2, axis2=-1).mean(axis=(0, -1))

    model.run_with_hooks(IDS, fwd_hooks=[("blocks.*.attn.hook_pattern", score)])
    for layer in range(2):
        want = np.asarray(cache[f"blocks.{layer}.attn.hook_pattern"]).diagonal(axis1=-2, axis2=-1).mean(axis=(0, -1))
        np.testing.assert_allclose(store[layer], want, atol=1e-6)

    def show(pattern, hook):
        print(hook.name, float(pattern.max()) > 0)

    model.run_with_hooks(IDS, fwd_hooks=[("blocks.0.attn.hook_pattern", show)])
    model.run_with_hooks(IDS, fwd_hooks=[("blocks.0.attn.hook_pattern", show)])
    assert capsys.readouterr().out == "blocks.0.attn.hook_pattern True\n" * 2  # each call, as TransformerLens

    compiles = model._hooked.programs.compiles

    def keep(pattern, hook):
        hook.save(pattern.diagonal(axis1=-2, axis2=-1).mean(axis=(0, -1)), f"score{hook.layer()}")

    model.run_with_hooks(IDS, fwd_hooks=[("blocks.*.attn.hook_pattern", keep)])
    np.testing.assert_allclose(np.asarray(model.saved["score1"]), store[1], atol=1e-6)
    assert model._hooked.programs.compiles == compiles + 1  # saving is compiled: no eager run

    def in_place(v, hook):
        v[:, :, 0] = 0.0

    with pytest.raises(UsageError) as refused:
        model.run_with_hooks(IDS, fwd_hooks=[("blocks.0.attn.hook_v", in_place)])
    assert "x.at[idx].set(y)" in str(refused.value) and "`return x.at[:, :, head].set(0)`" in str(refused.value)


def test_a_first_answer_without_the_optimizing_compile(model) -> None:
    model.eager_first = True
    programs = model._hooked.programs
    ids = IDS[:, :3]  # a shape no other test used: its forward's operations are not compiled yet

    def triple(x, hook):
        return x * 3.0

    def halve(x, hook):
        return x * 0.5

    eager, quick = programs.eager_calls, programs.quick_compiles
    first = np.asarray(model.run_with_hooks(ids, fwd_hooks=[("blocks.1.hook_mlp_out", triple)]))
    assert (programs.eager_calls, programs.quick_compiles) == (eager, quick + 1)  # cold: the QUICK program
    programs.wait()  # the optimized program, and the forward once op by op at this shape (the warm-up)
    halved = np.asarray(model.run_with_hooks(ids, fwd_hooks=[("blocks.1.hook_mlp_out", halve)]))
    assert (programs.eager_calls, programs.quick_compiles) == (eager + 1, quick + 1)  # a new hook: op by op
    programs.wait()
    later = np.asarray(model.run_with_hooks(ids, fwd_hooks=[("blocks.1.hook_mlp_out", triple)]))
    again = np.asarray(model.run_with_hooks(ids, fwd_hooks=[("blocks.1.hook_mlp_out", halve)]))
    assert programs.eager_calls == eager + 1  # both compiled now
    np.testing.assert_allclose(first, later, atol=1e-5)
    np.testing.assert_allclose(halved, again, atol=1e-5)
    model.eager_first = False


def test_a_new_length_inside_a_bucket_compiles_nothing(model) -> None:
    events: list[str] = []
    model.run_with_cache(IDS)
    model(IDS)
    jax.monitoring.register_event_duration_secs_listener(lambda name, *_, **__: events.append(name))
    logits, cache = model.run_with_cache(IDS[:, :5])
    plain = model(IDS[:, :4])
    assert logits.shape == (2, 5, 100) and plain.shape == (2, 4, 100) and cache["hook_embed"].shape == (2, 5, 32)
    assert [e for e in events if e.endswith("backend_compile_duration")] == []


class AblateScaled(AnalysisBase, GrokTrainer):
    """Patches with self.forward, scaling the MLP's output by an attribute the user changes between runs."""

    NAME = "ablate_scaled"
    scale = 1.0

    def select(self, paths):
        return "blocks_0/mlp"

    def analyze(self, layer, inputs):
        x = self.current_batch["inputs"]
        return {"out": self.forward(x, {"blocks_0/mlp": lambda y: y * self.scale})}


def test_an_analysis_reads_its_changed_attribute(tmp_path) -> None:
    analysis = AblateScaled(config(tmp_path), store=tmp_path / "runs")
    analysis.setup()
    first = analysis.compute()["out"]
    assert analysis.compilations == 1
    analysis.scale = 0.0
    second = analysis.compute()["out"]
    analysis.scale = 1.0
    third = analysis.compute()["out"]
    assert analysis.compilations == 2  # scale 1.0's program again; 0.0 traced once
    x = analysis.analysis_batch()["inputs"]
    np.testing.assert_allclose(second, analysis.forward(x, {"blocks_0/mlp": jnp.zeros_like}), atol=1e-5)
    np.testing.assert_allclose(first, third, atol=1e-6)
    assert np.abs(first - second).max() > 1e-4
    analysis.cleanup()


def test_a_long_loop_of_new_hooks_keeps_none_of_them(model) -> None:
    """Leaks: a loop making a new partial per call keeps no hook alive past its call (only the first one's walk, held
    by the program it built) and the programs stay bounded."""
    import gc
    import weakref

    def patch(resid, hook, pos):
        return resid.at[:, pos].set(0.0)

    refs = []
    for p in range(40):
        hook = functools.partial(patch, pos=p % 6)
        refs.append(weakref.ref(hook))
        model.run_with_hooks(IDS, fwd_hooks=[("blocks.0.hook_resid_pre", hook)])
    del hook
    gc.collect()
    assert sum(ref() is not None for ref in refs) <= 1
    programs = model._hooked.programs
    assert len(programs._programs) <= programs.kept and len(programs._modes) <= 1024


class AblateConfigured(AnalysisBase, GrokTrainer):
    """The scale is configuration set in __init__ (a list of heads too): changing either from outside retraces."""

    NAME = "ablate_configured"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.scale = 1.0
        self.heads = [0]

    def select(self, paths):
        return "blocks_0/mlp"

    def analyze(self, layer, inputs):
        x = self.current_batch["inputs"]
        return {"out": self.forward(x, {"blocks_0/mlp": lambda y: y * self.scale * len(self.heads)})}


def test_an_attribute_set_in_init_and_changed_from_outside_retraces(tmp_path) -> None:
    analysis = AblateConfigured(config(tmp_path), store=tmp_path / "runs")
    analysis.setup()
    first = analysis.compute()["out"]
    analysis.scale = 0.0
    zeroed = analysis.compute()["out"]
    analysis.scale, analysis.heads = 1.0, [0, 1]  # a new list: seen
    doubled = analysis.compute()["out"]
    x = analysis.analysis_batch()["inputs"]
    np.testing.assert_allclose(zeroed, analysis.forward(x, {"blocks_0/mlp": jnp.zeros_like}), atol=1e-5)
    np.testing.assert_allclose(doubled, analysis.forward(x, {"blocks_0/mlp": lambda y: y * 2.0}), atol=1e-5)
    assert np.abs(first - zeroed).max() > 1e-4
    analysis.cleanup()
