"""Dictionaries and corpora by name against a local hub (tests/hub_server.py): `hf://ORG/REPO/PATH` and SAELens'
release names (looked up in the installed sae-lens package's own directory) wherever a SAELens folder is taken,
and `data/text=hf://datasets/ORG/NAME` streamed into `lenscope run lm/eval model/pretrained=ORG/NAME`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import torch_or_skip  # noqa: E402

torch_or_skip()
from hub_repos import HOOK, RELEASE, RELEASE_REPO, RELEASE_SAE, hub  # noqa: E402, F401 (hub: the local hub fixture)
from hub_server import Hub  # noqa: E402

from lenscope.attribution import load_transcoders  # noqa: E402
from lenscope.dictionaries import load_saelens  # noqa: E402
from lenscope.errors import UsageError  # noqa: E402
from lenscope.models import from_pretrained  # noqa: E402
from lenscope.models.hub.corpus import stream_texts  # noqa: E402

TOKENS = np.array([[1, 5, 9, 14, 3, 7, 22, 40]])


@pytest.fixture
def cache(hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache and the local hub as HF_ENDPOINT."""
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return tmp_path / "hf"


def equal_dictionaries(a, b) -> None:
    assert a.spec == b.spec
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        np.testing.assert_array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)))


def test_run_with_saes_from_a_hub_address_equals_the_folder(hub: Hub, cache: Path, monkeypatch) -> None:
    model = from_pretrained(hub.folders["gpt2"], tokenizer=False)
    named = load_saelens(f"hf://acme/saes/{HOOK}")
    assert named[1]["metadata"]["hook_name"] == HOOK
    np.testing.assert_array_equal(np.asarray(model.run_with_saes(TOKENS, saes=[named])),
                                  np.asarray(model.run_with_saes(TOKENS, saes=[load_saelens(hub.folders["sae"])])))
    with pytest.raises(UsageError, match=r"saes\[0\] is the text 'hf://acme/saes/blocks.0.hook_resid_post'; open "
                                         r"it first: lenscope.dictionaries.load_saelens"):
        model.run_with_saes(TOKENS, saes=[f"hf://acme/saes/{HOOK}"])
    (transcoder,) = load_transcoders(f"hf://acme/saes/{HOOK}@main", store=None)  # transcoders= takes one too
    equal_dictionaries(transcoder, named[0])
    hub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    equal_dictionaries(load_saelens(f"hf://acme/saes/{HOOK}")[0], named[0])  # the cached copy, nothing asked
    assert hub.requests == []
    with pytest.raises(UsageError, match=r"model acme/saes@v2 blocks.0.hook_resid_post is not in the Hugging Face "
                                         r"cache .* and HF_HUB_OFFLINE is set"):
        load_saelens(f"hf://acme/saes/{HOOK}@v2")
    with pytest.raises(UsageError, match=r"data/text=hf://datasets/acme/corpus: a corpus on the hub is streamed, and "
                                         r"HF_HUB_OFFLINE is set"):
        next(stream_texts("hf://datasets/acme/corpus"))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(UsageError, match=r"hf://acme/saes/blocks.9 is not a SAELens dictionary: it lacks cfg.json, "
                                         r"sae_weights.safetensors; it holds nothing"):
        load_saelens("hf://acme/saes/blocks.9")
    with pytest.raises(UsageError, match=r"'hf://acme' is not a hub address; expected hf://ORG/REPO\[/SUBFOLDER\]"):
        load_saelens("hf://acme")


def test_a_saelens_release_resolves_through_the_installed_directory(hub: Hub, cache: Path, monkeypatch) -> None:
    pytest.importorskip("sae_lens", reason="needs sae-lens: pip install 'torch==2.13.0+cpu' -e '.[saelens]'")
    hub.requests.clear()
    by_release, _ = load_saelens(RELEASE, sae_id=RELEASE_SAE)
    assert ("GET", f"/api/models/{RELEASE_REPO}") in hub.requests  # the directory's repo, served here
    equal_dictionaries(by_release, load_saelens(hub.folders["release_sae"])[0])
    equal_dictionaries(load_saelens(f"saelens://{RELEASE}/{RELEASE_SAE}")[0], by_release)
    with pytest.raises(UsageError, match=r"release 'gpt2-small-res-jb' has no SAE id 'blocks.0.hook_resid_prx' "
                                         r"\(did you mean blocks.0.hook_resid_pre"):
        load_saelens(RELEASE, sae_id="blocks.0.hook_resid_prx")
    with pytest.raises(UsageError, match=r"SAELens release 'gpt2-small-res-jx' is not in sae-lens' directory .*"
                                         r"did you mean gpt2-small-res-jb"):
        load_saelens("saelens://gpt2-small-res-jx/blocks.0.hook_resid_pre")
    monkeypatch.setitem(sys.modules, "sae_lens", None)  # as if sae-lens were not installed
    with pytest.raises(UsageError, match=r"directory of releases of the sae-lens package, which is not installed: "
                                         r"pip install sae-lens .*or give the SAE's place on the hub"):
        load_saelens(RELEASE, sae_id=RELEASE_SAE)


def test_a_corpus_on_the_hub_streams_into_lm_eval(hub: Hub, cache: Path, tmp_path: Path) -> None:
    """The command as a user types it, in its own process (`datasets` reads HF_ENDPOINT once, at import)."""
    hub.requests.clear()
    done = subprocess.run([sys.executable, "-m", "lenscope", "run", "lm/eval", "model/pretrained=acme/tiny-gpt2",
                           "data/text=hf://datasets/acme/corpus", "data/seq_len=8", "--store", str(tmp_path / "runs")],
                          cwd=tmp_path, env=dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1"), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (cache / "models--acme--tiny-gpt2" / "refs" / "main").is_file()
    assert any("/datasets/acme/corpus/resolve/" in path and path.endswith(".parquet") for _, path in hub.requests)
    assert not list(cache.rglob("*.parquet"))  # streamed, not downloaded (datasets caches only the README)
    with pytest.raises(UsageError, match=r"a corpus on the hub is hf://datasets/ORG/NAME"):
        next(stream_texts("hf://acme/corpus"))
