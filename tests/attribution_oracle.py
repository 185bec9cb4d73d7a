"""An independent dense attribution graph of lenscope's reference Transformer (LayerNorms, ReLU MLPs) over JumpReLU
transcoders, in float64 NumPy from the parameter tree: it shares no code with lenscope.attribution.

The local replacement model is circuit-tracer's: attention patterns and LayerNorm scales frozen at their values on
the prompt, each MLP's output split into its transcoder's features, an error term and the decoder bias. Frozen, the
readouts are affine in what is added at the embeddings and at the MLP outputs, so an edge is the change in its target
when its source's vector is added there: the difference of two forwards, exact up to rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

EPS = 1e-6  # flax.linen.LayerNorm's epsilon


def _f64(tree: Any) -> Any:
    return {k: _f64(v) for k, v in tree.items()} if isinstance(tree, dict) else np.asarray(tree, np.float64)


def _norm(p: dict, x: np.ndarray, rstd: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """LayerNorm of x [..., d] (flax's: E[x²] - E[x]² variance), with `rstd` frozen when given."""
    mean = x.mean(-1, keepdims=True)
    if rstd is None:
        rstd = 1.0 / np.sqrt(np.maximum((x * x).mean(-1, keepdims=True) - mean * mean, 0.0) + EPS)
    return (x - mean) * rstd * p["scale"] + p["bias"], rstd


class Oracle:
    """The clean forward on one prompt, recording what the replacement model freezes, and the frozen forward."""

    def __init__(self, params: Any, tokens: np.ndarray, n_layers: int) -> None:
        self.p, self.tokens, self.n_layers = _f64(params), np.asarray(tokens), n_layers
        p, n = self.p, len(self.tokens)
        x = p["embed"]["embedding"][self.tokens] + p["pos_embed"][:n]
        self.patterns, self.rstd, mlp_in, mlp_out = [], [], [], []
        causal = np.tril(np.ones((n, n), bool))
        for i in range(n_layers):
            block = p[f"blocks_{i}"]
            h, r1 = _norm(block["ln1"], x)
            q = np.einsum("pd,dhk->hpk", h, block["attn"]["query"]["kernel"])
            k = np.einsum("pd,dhk->hpk", h, block["attn"]["key"]["kernel"])
            scores = np.where(causal, q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]), -np.inf)
            pattern = np.exp(scores - scores.max(-1, keepdims=True))
            self.patterns.append(pattern / pattern.sum(-1, keepdims=True))
            x = x + self._attend(block, h, i)
            m, r2 = _norm(block["ln2"], x)
            out = np.maximum(m @ block["mlp"]["fc_in"]["kernel"] + block["mlp"]["fc_in"]["bias"], 0.0)
            out = out @ block["mlp"]["fc_out"]["kernel"] + block["mlp"]["fc_out"]["bias"]
            self.rstd.append((r1, r2))
            mlp_in.append(m)
            mlp_out.append(out)
            x = x + out
        final, self.rstd_final = _norm(p["ln_final"], x)
        self.mlp_in, self.mlp_out, self.final = np.stack(mlp_in), np.stack(mlp_out), final
        self.logits = final @ p["unembed"]["kernel"]

    def _attend(self, block: dict, h: np.ndarray, layer: int) -> np.ndarray:
        """Attention output [..., n, d] of normed inputs h [..., n, d] through layer's frozen pattern."""
        v = np.einsum("...pd,dhk->...hpk", h, block["attn"]["value"]["kernel"])
        mixed = np.einsum("hqp,...hpk->...qhk", self.patterns[layer], v)
        return np.einsum("...qhk,hkd->...qd", mixed, block["attn"]["out"]["kernel"])

    def frozen(self, embed_delta: np.ndarray, mlp_delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(MLP inputs [B, n_layers, n, d], final residual [B, n, d]) with patterns, scales and MLP outputs frozen,
        embed_delta [B, n, d] added to the token embeddings and mlp_delta [B, n_layers, n, d] to the MLP outputs."""
        p, n = self.p, len(self.tokens)
        x = p["embed"]["embedding"][self.tokens] + embed_delta + p["pos_embed"][:n]
        ins = []
        for i in range(self.n_layers):
            block, (r1, r2) = p[f"blocks_{i}"], self.rstd[i]
            x = x + self._attend(block, _norm(block["ln1"], x, r1)[0], i)
            ins.append(_norm(block["ln2"], x, r2)[0])
            x = x + self.mlp_out[i] + mlp_delta[:, i]
        return np.stack(ins, axis=1), _norm(p["ln_final"], x, self.rstd_final)[0]


def jumprelu(transcoder: Any, x: np.ndarray) -> np.ndarray:
    """A JumpReLU transcoder's activations of x [..., d]: relu(pre) where pre exceeds relu(threshold)."""
    pre = x @ np.asarray(transcoder.W_enc, np.float64) + np.asarray(transcoder.b_enc, np.float64)
    return np.maximum(pre, 0.0) * (pre > np.maximum(np.asarray(transcoder.threshold, np.float64), 0.0))


def dense_graph(params: Any, tokens: np.ndarray, transcoders: list, logit_targets: np.ndarray,
                skip_positions: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(active features [F, 3] (layer, position, feature), their activations [F], adjacency rows [F + K, F +
    n_layers * n + n]): the feature targets, then the logit targets, against every source node, in circuit-tracer's
    order (features layer-major, error nodes per (layer, position), token nodes)."""
    n_layers, n = len(transcoders), len(tokens)
    oracle = Oracle(params, tokens, n_layers)
    d = oracle.mlp_out.shape[-1]
    found, values, vectors, encoders, errors = [], [], [], [], np.zeros((n_layers, n, d))
    for layer, transcoder in enumerate(transcoders):
        acts = jumprelu(transcoder, oracle.mlp_in[layer])
        acts[:skip_positions] = 0.0
        w_dec = np.asarray(transcoder.W_dec, np.float64)
        errors[layer] = oracle.mlp_out[layer] - (acts @ w_dec + np.asarray(transcoder.b_dec, np.float64))
        errors[layer, :skip_positions] = 0.0
        for pos, feature in zip(*np.nonzero(acts)):
            found.append((layer, pos, feature))
            values.append(acts[pos, feature])
            vectors.append(("mlp", layer, pos, acts[pos, feature] * w_dec[feature]))
            encoders.append(np.asarray(transcoder.W_enc, np.float64)[:, feature])
    sources = vectors + [("mlp", layer, pos, errors[layer, pos]) for layer in range(n_layers) for pos in range(n)]
    sources += [("embed", None, pos, oracle.p["embed"]["embedding"][tokens[pos]]) for pos in range(n)]
    embed, mlp = np.zeros((len(sources) + 1, n, d)), np.zeros((len(sources) + 1, n_layers, n, d))
    for row, (site, layer, pos, vector) in enumerate(sources, start=1):  # row 0: nothing added
        if site == "embed":
            embed[row, pos] = vector
        else:
            mlp[row, layer, pos] = vector
    mlp_in, final = oracle.frozen(embed, mlp)
    moved_in, moved_final = mlp_in[1:] - mlp_in[:1], final[1:] - final[:1]
    features = np.array(found, np.int64).reshape(-1, 3)
    feature_rows = np.stack([moved_in[:, layer, pos] @ enc for (layer, pos, _), enc in zip(found, encoders)])
    unembed = oracle.p["unembed"]["kernel"]
    logit_vectors = (unembed[:, logit_targets] - unembed.mean(axis=1, keepdims=True)).T
    logit_rows = logit_vectors @ moved_final[:, n - 1].T
    return features, np.array(values), np.concatenate([feature_rows, logit_rows])
