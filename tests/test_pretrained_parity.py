"""Parity with `transformers` (PyTorch, eager attention) for every family, on tiny random checkpoints.

Per family: logits within 1e-5 (float32), every block's residual stream, a left-padded batch, 20 greedy
tokens with the KV cache, and a bfloat16 load within bfloat16 tolerance. Skipped without torch/transformers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import FAMILIES, VOCAB, checkpoint, torch_or_skip  # noqa: E402

from lenscope.capture import EquinoxBackend  # noqa: E402
from lenscope.capture.patch import record  # noqa: E402
from lenscope.models import from_pretrained_no_processing  # noqa: E402
from lenscope.models.pretrained import generate  # noqa: E402

torch, transformers = torch_or_skip()
TOL = 1e-5
IDS = np.random.default_rng(0).integers(3, VOCAB, (2, 12))
LEFT = np.array([[0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1], [1] * 12])


def torch_logits(model, ids, mask=None, hidden=False):
    with torch.no_grad():
        kwargs = {}
        if mask is not None:
            kwargs["attention_mask"] = torch.tensor(mask)
            kwargs["position_ids"] = torch.tensor(np.maximum(np.cumsum(mask, -1) - 1, 0))
        out = model(torch.tensor(ids), output_hidden_states=hidden, **kwargs)
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_family_matches_transformers(family: str) -> None:
    hf, folder = checkpoint(family)
    model = from_pretrained_no_processing(folder).model
    n = model.config.n_layers
    padded = np.where(LEFT == 1, IDS, 0)
    ids, mask = np.concatenate([IDS, padded]), np.concatenate([np.ones_like(LEFT), LEFT])
    paths = [f"blocks/{i}/hook_resid_pre" for i in range(n)]
    logits, resid = jax.jit(lambda t, m: record(lambda x, y: model(x, y), (t, m), paths,
                                                backend=EquinoxBackend()))(ids, mask)
    logits = np.asarray(logits)

    out = torch_logits(hf, IDS, hidden=True)
    diff = float(np.abs(logits[:2] - out.logits.numpy()).max())
    print(f"{family}: logits max abs diff {diff:.2e}")
    assert diff <= TOL
    for i, path in enumerate(paths):  # hidden_states[i] is the stream entering layer i
        np.testing.assert_allclose(np.asarray(resid[path])[:2], out.hidden_states[i].numpy(), atol=TOL, rtol=0)

    ref = torch_logits(hf, padded, LEFT).logits.numpy()
    keep = LEFT.astype(bool)
    assert float(np.abs(logits[2:][keep] - ref[keep]).max()) <= TOL

    hf.generation_config.eos_token_id = None
    with torch.no_grad():
        greedy = hf.generate(torch.tensor(padded), attention_mask=torch.tensor(LEFT), max_new_tokens=20,
                             do_sample=False, pad_token_id=0).numpy()
    np.testing.assert_array_equal(np.asarray(generate(model, padded, LEFT, max_new_tokens=20)), greedy)

    low = from_pretrained_no_processing(folder, dtype=jnp.bfloat16, tokenizer=False)
    assert {x.dtype for x in jax.tree_util.tree_leaves(low.model)} == {jnp.dtype(jnp.bfloat16)}
    low_logits = np.asarray(low(IDS)).astype(np.float32)
    assert float(np.abs(low_logits - logits[:2]).max()) <= 0.05 * float(np.abs(logits).max())
