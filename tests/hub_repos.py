"""What the local hub (hub_server.Hub) serves in the tests: tiny GPT-2 and Llama checkpoints (tests/hf_models.py),
two revisions of the Llama, SAELens-format SAEs, a Parquet corpus, and one repo per fault."""

from __future__ import annotations

import io
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from hf_models import WORDS, checkpoint, save_tokenizer
from hub_server import Hub, folder_files

from lenscope.dictionaries import Dictionary, Spec, save_saelens

HOOK = "blocks.0.hook_resid_post"
RELEASE, RELEASE_SAE = "gpt2-small-res-jb", "blocks.0.hook_resid_pre"  # an entry of sae-lens' directory
RELEASE_REPO = "jbloom/GPT2-Small-SAEs-Reformatted"  # its repo, served here
FAULTS = {"acme/truncated": "truncate", "acme/flaky": "truncate_once", "acme/corrupt": "corrupt", "acme/slow": "slow"}


def model_files(family: str, seed: int = 0) -> tuple[Path, dict[str, bytes]]:
    """(folder, its files) of a tiny checkpoint of `family` with a tokenizer."""
    _, folder = checkpoint(family, seed)
    if not (folder / "tokenizer.json").exists():
        save_tokenizer(folder)
    return folder, folder_files(folder)


def random_sae(d_in: int = 32, d_sae: int = 64, seed: int = 0) -> Dictionary:
    """A standard SAE with every parameter random (biases small), so many latents fire."""
    rng = np.random.default_rng(seed)
    params = {"W_enc": rng.normal(size=(d_in, d_sae)) * 0.3, "b_enc": rng.normal(size=d_sae) * 0.1,
              "W_dec": rng.normal(size=(d_sae, d_in)) * 0.3, "b_dec": rng.normal(size=d_in) * 0.1}
    return Dictionary.of(Spec("standard", d_in, d_sae), {k: jnp.asarray(v, jnp.float32) for k, v in params.items()})


def corpus_parquet(documents: int = 60, seed: int = 0) -> bytes:
    """A Parquet file of `documents` rows of random words in column `text` (row groups of 8)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    texts = [" ".join(WORDS[int(rng.integers(0, len(WORDS)))] for _ in range(int(rng.integers(6, 16))))
             for _ in range(documents)]
    buffer = io.BytesIO()
    pq.write_table(pa.table({"text": texts, "id": list(range(documents))}), buffer, row_group_size=8)
    return buffer.getvalue()


def populate(hub: Hub, root: Path) -> dict[str, Path]:
    """Fill `hub` with every test repo; {name: the local folder it was made from}."""
    gpt2, gpt2_files = model_files("gpt2")
    llama, llama_files = model_files("llama")
    llama2, llama2_files = model_files("llama", seed=1)
    hub.repo("acme/tiny-gpt2").commit({**gpt2_files, "pytorch_model.bin": b"not read", "notes/extra.md": b"x"})
    tiny_llama = hub.repo("acme/tiny-llama")
    tiny_llama.commit(llama2_files, "v2")
    tiny_llama.commit(llama_files, "main")
    hub.repo("acme/bin-only").commit({"config.json": gpt2_files["config.json"], "pytorch_model.bin": b"pickle"})
    hub.repo("acme/gated").commit(gpt2_files)
    hub.repo("acme/gated").gated = True
    hub.repo("acme/gated").token = "hf_test_token"  # HF_TOKEN=hf_test_token opens it
    hub.repo("acme/stalls").commit(gpt2_files)
    hub.repo("acme/stalls").stalls = True
    for name, fault in FAULTS.items():
        hub.repo(name).commit(gpt2_files)
        hub.repo(name).faults["model.safetensors"] = fault
    sae = save_saelens(random_sae(), root / "sae", metadata={"hook_name": HOOK})
    hub.repo("acme/saes").commit(folder_files(sae, f"{HOOK}/"))
    release_sae = save_saelens(random_sae(seed=1), root / "release_sae", metadata={"hook_name": RELEASE_SAE})
    hub.repo(RELEASE_REPO).commit(folder_files(release_sae, f"{RELEASE_SAE}/"))
    hub.repo("acme/corpus", "dataset").commit({"data/train-00000-of-00001.parquet": corpus_parquet(),
                                               "README.md": b"# a corpus for the tests\n"})
    return {"gpt2": gpt2, "llama": llama, "llama2": llama2, "sae": sae, "release_sae": release_sae}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    """The local hub with every test repo; `hub.folders` are the folders the repos were made from."""
    server = Hub()
    server.folders = populate(server, tmp_path_factory.mktemp("hub_repos"))
    yield server
    server.close()
