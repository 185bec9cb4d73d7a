"""SAELens' file format both ways: a folder with `cfg.json` and `sae_weights.safetensors` (no torch needed).

Architectures map as SAELens names them: SAEs `standard`, `topk`, `jumprelu`, `gated` (its `b_enc` is
SAELens' `b_gate`; a BatchTopK or Matryoshka BatchTopK dictionary is saved as the JumpReLU it acts as at
inference, as SAELens does); transcoders `transcoder`,
`skip_transcoder`, `jumprelu_transcoder`, `jumprelu_skip_transcoder`. SAELens stores `W_skip` as
[d_out, d_in]; lenscope's is its transpose. Decoder-norm ranking is folded into the weights on save.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..errors import UsageError, hint
from ..files import atomic_path
from ..models.hub.dictionary import dictionary_folder
from .core import BATCH_TOPK, Dictionary, Spec
from .sae_object import SAE
from .saelens_checks import check_tensors, read_cfg, read_weights

CFG_FILENAME = "cfg.json"
WEIGHTS_FILENAME = "sae_weights.safetensors"
_TRANSCODERS = {"transcoder": ("standard", False), "skip_transcoder": ("standard", True),
                "jumprelu_transcoder": ("jumprelu", False), "jumprelu_skip_transcoder": ("jumprelu", True)}
_SAES = ("standard", "topk", "jumprelu", "gated")
FORMAT_VERSION = "6.0.0"  # the cfg.json layout written (SAELens reads older layouts through a converter)
_NORMALIZATIONS = ("none", "expected_average_only_in")  # the latter is folded into the weights when saved


def saelens_architecture(spec: Spec) -> str:
    """The SAELens architecture name a dictionary is saved under; a UsageError for one SAELens cannot hold."""
    if spec.blocks > 1:
        raise UsageError(f"SAELens has no crosscoder format (this dictionary reads {spec.blocks} models' activations "
                         "side by side); keep a crosscoder as its lenscope node")
    arch = "jumprelu" if spec.architecture in BATCH_TOPK else spec.architecture
    if not spec.transcoder:
        return arch
    for name, (base, skip) in _TRANSCODERS.items():
        if base == arch and skip == spec.skip:
            return name
    raise UsageError(f"SAELens has no {spec.architecture} transcoder (sae_lens 6 reads {', '.join(_TRANSCODERS)}: "
                     "ReLU or JumpReLU); to save one in its format train it with sae/architecture=batchtopk (saved as "
                     "the jumprelu_transcoder it is at inference), jumprelu or standard. lenscope's own graph reads "
                     "any transcoder as it is: compute_attribution_graph,transcoders=NODE")


RESHAPES = ("none", "hook_z")  # SAELens' reshape_activations; hook_z SAEs are spliced with the heads flattened


def save_saelens(d: Dictionary, folder: str | os.PathLike, metadata: dict[str, Any] | None = None,
                 reshape_activations: str = "none") -> Path:
    """Write `d` as a SAELens folder (cfg.json + sae_weights.safetensors); returns the folder. `reshape_activations=
    "hook_z"`: an SAE of a hook_z activation with its heads flattened (d_in = heads * d_head), as SAELens marks it."""
    from safetensors.numpy import save  # lazy: safetensors is needed only to read or write these files

    arch = saelens_architecture(d.spec)
    if d.spec.rescale_acts_by_decoder_norm:
        d = d.fold_decoder_norms()
    tensors = {"W_enc": d.W_enc, "b_gate" if arch == "gated" else "b_enc": d.b_enc, "W_dec": d.W_dec,
               "b_dec": d.b_dec}
    if arch == "gated":
        tensors.update(b_mag=d.b_mag, r_mag=d.r_mag)
    if arch.startswith("jumprelu"):
        tensors["threshold"] = d.threshold
    if d.W_skip is not None:
        tensors["W_skip"] = jnp.swapaxes(d.W_skip, 0, 1)
    tensors = {k: np.ascontiguousarray(np.asarray(v, np.float32)) for k, v in tensors.items()}
    cfg = {"architecture": arch, "d_in": d.spec.d_in, "d_sae": d.spec.d_sae, "dtype": "float32", "device": "cpu",
           "apply_b_dec_to_input": d.spec.apply_b_dec_to_input, "normalize_activations": "none",
           "reshape_activations": reshape_activations,
           "metadata": {"sae_lens_version": FORMAT_VERSION, **(metadata or {})}}
    if d.spec.transcoder:
        cfg["d_out"] = d.spec.d_out
    if arch == "topk":
        cfg.update(k=d.spec.k, rescale_acts_by_decoder_norm=False)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in ((WEIGHTS_FILENAME, save(tensors)), (CFG_FILENAME, json.dumps(cfg, indent=2).encode())):
        with atomic_path(folder / name) as tmp:
            Path(tmp).write_bytes(content)
    return folder


def load_saelens(folder: str | os.PathLike, sae_id: str | None = None) -> SAE:
    """(Dictionary, its cfg.json) from a SAELens folder, a hub address `hf://ORG/REPO[/SUBFOLDER][@REVISION]`, or a
    SAELens release's SAE (`saelens://RELEASE/SAE_ID`, or `load_saelens(RELEASE, sae_id=SAE_ID)`), fetched into
    the Hugging Face cache once; unknown architectures and settings are refused by name. The SAE unpacks as
    (Dictionary, cfg.json) and answers SAELens' `sae.cfg.*`, `encode`, `decode`, `sae(x)`, `eval()`."""
    folder = dictionary_folder(folder, sae_id)
    for name in (CFG_FILENAME, WEIGHTS_FILENAME):
        if not (folder / name).is_file():
            raise UsageError(f"{folder} is not a SAELens dictionary folder: it lacks {name} "
                             f"(expected {CFG_FILENAME} and {WEIGHTS_FILENAME})")
    return from_cfg_and_tensors(read_cfg(folder / CFG_FILENAME), read_weights(folder / WEIGHTS_FILENAME), folder)


def from_saelens(sae: Any) -> SAE:
    """A SAELens SAE object (torch) as lenscope's SAE: its cfg and weights read, with a folder's checks."""
    cfg = getattr(sae, "cfg", None)
    if cfg is None or not hasattr(sae, "state_dict"):
        raise UsageError(f"from_saelens: a {type(sae).__name__} is not a SAELens SAE (expected .cfg and "
                         ".state_dict()); for a folder or a hub address use load_saelens")
    raw = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(vars(cfg))
    arch = getattr(cfg, "architecture", "standard")
    raw["architecture"] = arch() if callable(arch) else arch
    tensors = {name: np.asarray(t.detach().cpu().float().numpy()) for name, t in sae.state_dict().items()}
    return from_cfg_and_tensors(raw, tensors, Path(f"<SAELens {type(sae).__name__}>"))


def from_cfg_and_tensors(cfg: dict[str, Any], stored: dict[str, Any], folder: Path) -> SAE:
    """The SAE of a cfg.json and its tensors by SAELens name (`folder` names them in errors)."""
    arch = cfg.get("architecture", "standard")
    known = (*_SAES, *_TRANSCODERS)
    if arch not in known:
        raise UsageError(f"{folder}: SAELens architecture {arch!r} is not supported{hint(arch, known)}; "
                         f"supported: {', '.join(known)}")
    norm = cfg.get("normalize_activations", "none")
    if norm not in _NORMALIZATIONS:
        raise UsageError(f"{folder}: normalize_activations={norm!r} is not supported (a run-time normalization); "
                         f"supported: {', '.join(_NORMALIZATIONS)}")
    if cfg.get("reshape_activations", "none") not in RESHAPES:
        raise UsageError(f"{folder}: reshape_activations={cfg['reshape_activations']!r} is not supported; "
                         f"supported: {', '.join(RESHAPES)} (hook_z: the heads flattened before encoding)")
    base, skip = _TRANSCODERS.get(arch, (arch, False))
    transcoder = arch in _TRANSCODERS
    spec = Spec(base, int(cfg["d_in"]), int(cfg["d_sae"]), d_out=int(cfg.get("d_out", 0)) if transcoder else 0,
                k=int(cfg.get("k", 1)) if base == "topk" else 32, transcoder=transcoder, skip=skip,
                apply_b_dec_to_input=bool(cfg.get("apply_b_dec_to_input", True)),
                rescale_acts_by_decoder_norm=bool(cfg.get("rescale_acts_by_decoder_norm", False)))
    check_tensors(folder / WEIGHTS_FILENAME, spec, stored, arch)
    tensors = {k: jnp.asarray(v, jnp.float32) for k, v in stored.items()}
    if "log_threshold" in tensors:  # older JumpReLU files
        tensors["threshold"] = jnp.exp(tensors.pop("log_threshold"))
    if "W_skip" in tensors:
        tensors["W_skip"] = jnp.swapaxes(tensors["W_skip"], 0, 1)
    if "b_gate" in tensors:
        tensors["b_enc"] = tensors.pop("b_gate")
    return SAE(Dictionary.of(spec, tensors), cfg)
