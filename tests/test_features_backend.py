"""run_with_features finds the model's library itself: an Equinox or NNX forward needs no backend named."""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lenscope.capture.choose import backend_of_forward
from lenscope.dictionaries import Dictionary, Spec, attach, run_with_features
from lenscope.dictionaries.core import init_params


class Mlp(eqx.Module):
    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __call__(self, x):
        return jax.vmap(lambda row: self.down(jax.nn.relu(self.up(row))))(x)


class Tiny(eqx.Module):
    mlp: Mlp

    def __call__(self, x):
        return self.mlp(x) + x


class TinyNnx(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.mlp = nnx.Linear(8, 8, rngs=rngs)

    def __call__(self, x):
        return self.mlp(x) + x


def _sae() -> Dictionary:
    spec = Spec("standard", d_in=8, d_sae=32)
    return Dictionary.of(spec, init_params(jax.random.PRNGKey(1), spec))


def _tiny() -> Tiny:
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return Tiny(Mlp(eqx.nn.Linear(8, 16, key=k1), eqx.nn.Linear(16, 8, key=k2)))


def test_an_equinox_forward_in_a_closure_a_partial_or_an_argument_finds_its_backend() -> None:
    model, x = _tiny(), jnp.asarray(np.random.default_rng(0).normal(size=(4, 8)), jnp.float32)
    attached = [attach(_sae(), "mlp")]
    clean = model(x)
    for fn, args in [(lambda t: model(t), (x,)),
                     (functools.partial(lambda m, t: m(t), model), (x,)), (lambda m, t: m(t), (model, x))]:
        assert type(backend_of_forward(fn, args)).__name__ == "EquinoxBackend"
        same, latents = run_with_features(fn, args, attached)          # no backend=EquinoxBackend() needed
        assert latents["mlp/sae"].shape == (4, 32)
        np.testing.assert_allclose(same, clean, atol=1e-5)             # the error term keeps the output


def test_an_nnx_forward_finds_its_backend() -> None:
    model, x = TinyNnx(nnx.Rngs(0)), jnp.ones((4, 8))
    same, latents = run_with_features(lambda t: model(t), (x,), [attach(_sae(), "mlp")])
    assert latents["mlp/sae"].shape == (4, 32)
    np.testing.assert_allclose(same, model(x), atol=1e-5)


def test_record_on_an_equinox_forward_needs_no_backend() -> None:
    from lenscope.capture.patch import record

    model, x = _tiny(), jnp.ones((4, 8))
    out, acts = record(lambda t: model(t), (x,), ["mlp"])
    np.testing.assert_allclose(acts["mlp"] + x, out, atol=1e-6)


def test_a_forward_object_with_an_args_field_or_keywords_in_a_partial_is_read_safely() -> None:
    model, x = _tiny(), jnp.ones((4, 8))

    class Forward:
        args = 3  # a field that happens to be called `args`, not a partial's arguments

        def __call__(self, t):
            return model(t)

    assert type(backend_of_forward(Forward(), (x,))).__name__ == "LinenBackend"  # nothing visible: the default
    keyword = functools.partial(lambda t, m: m(t), m=model)
    assert type(backend_of_forward(keyword, (x,))).__name__ == "EquinoxBackend"
