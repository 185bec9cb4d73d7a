"""Pretrained decoders from local Hugging Face checkpoints: GPT-2, Pythia, Llama, Mistral, Qwen 2/3, Gemma 1-3.

`from_pretrained(path)` reads config.json and safetensors into one architecture-generic Equinox Decoder
(families are config maps and weight maps, `families.py`, `weights.py`), with hook points named as in
TransformerLens. See docs/pretrained.md.
"""

from .activation_cache import ActivationCache
from .config import DecoderConfig
from .decoder import KV, MLP, Attention, Block, Decoder, Unembed, positions_of
from .factored import FactoredMatrix
from .families import FAMILIES, decoder_config
from .generate import generate
from .layers import Hook, Norm
from .load import random_decoder
from .locate import hub_cache, locate
from .pretrained import Pretrained, from_pretrained, from_pretrained_no_processing
from .processing import process
from .tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "FAMILIES", "KV", "MLP", "ActivationCache", "Attention", "Block", "Decoder", "DecoderConfig", "FactoredMatrix",
    "Hook", "Norm",
    "Pretrained", "Tokenizer", "Unembed", "decoder_config", "from_pretrained", "from_pretrained_no_processing",
    "generate", "hub_cache",
    "load_tokenizer", "locate", "positions_of", "process", "random_decoder",
]
