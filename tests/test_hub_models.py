"""Models by repo id against a local hub (tests/hub_server.py on 127.0.0.1): downloaded into an empty Hugging Face
cache, reused offline, revisions told apart, and every hostile or faulty hub refused with exit 2 and a clear line,
leaving nothing half-written in the cache."""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hf_models import text_file, torch_or_skip  # noqa: E402

torch_or_skip()
from cli_runner import run_cli  # noqa: E402
from hub_repos import hub  # noqa: E402, F401 (the local hub fixture)
from hub_server import Hub  # noqa: E402

from lenscope.errors import UsageError  # noqa: E402
from lenscope.models import from_pretrained  # noqa: E402

TOKENS = np.array([[1, 5, 9, 14, 3, 7, 22, 40]])


@pytest.fixture
def cache(hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache, the local hub as HF_ENDPOINT, online, 1-2 s timeouts."""
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 1)  # huggingface_hub reads it once, at import
    return tmp_path / "hf"


def leftovers(cache: Path) -> list[str]:
    """Files in the cache that a later run could mistake for a download: temporaries, and any snapshot file."""
    return sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*")
                  if p.name.endswith(".incomplete") or ("snapshots" in p.parts and p.name.endswith(".safetensors")))


def logits(model) -> np.ndarray:
    return np.asarray(model(TOKENS))


def test_a_repo_id_downloads_what_lenscope_reads_then_loads_offline(hub: Hub, cache: Path, monkeypatch) -> None:
    hub.requests.clear()
    loaded = from_pretrained("acme/tiny-llama")
    np.testing.assert_array_equal(logits(loaded), logits(from_pretrained(hub.folders["llama"])))
    assert sorted(os.listdir(loaded.path)) == ["config.json", "generation_config.json", "model.safetensors",
                                               "tokenizer.json"]
    assert loaded.path.parent.parent / "refs" / "main" == cache / "models--acme--tiny-llama" / "refs" / "main"
    got = [path for method, path in hub.requests if method == "GET" and "/resolve/" in path]
    assert len(got) == 4 and not any(p.endswith(".bin") for p in got)

    hub.requests.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = from_pretrained("acme/tiny-llama")
    assert again.path == loaded.path and hub.requests == []  # offline: the cache only
    np.testing.assert_array_equal(logits(again), logits(loaded))
    with pytest.raises(UsageError, match=r"model acme/tiny-llama@v2 is not in the Hugging Face cache .*HF_HUB_OFFLINE "
                                         r"is set: unset HF_HUB_OFFLINE to download it from http://127\.0\.0\.1"):
        from_pretrained("acme/tiny-llama", revision="v2")


def test_a_second_revision_is_told_apart_and_pinned(hub: Hub, cache: Path, monkeypatch) -> None:
    main, v2 = from_pretrained("acme/tiny-llama"), from_pretrained("acme/tiny-llama", revision="v2")
    assert main.path != v2.path
    np.testing.assert_array_equal(logits(v2), logits(from_pretrained(hub.folders["llama2"])))
    assert not np.allclose(logits(v2), logits(main))
    assert (cache / "models--acme--tiny-llama" / "refs" / "v2").read_text() == v2.path.name
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert from_pretrained("acme/tiny-llama@v2", tokenizer=False).path == v2.path  # the pinned revision, offline
    commit = from_pretrained("acme/tiny-llama", revision=main.path.name, tokenizer=False)  # a commit sha
    assert commit.path == main.path


def test_a_download_cut_off_once_resumes(hub: Hub, cache: Path) -> None:
    loaded = from_pretrained("acme/flaky", tokenizer=False)
    assert hub.repo("acme/flaky").faults["model.safetensors"] == "served"  # the first answer was cut off
    np.testing.assert_array_equal(logits(loaded), logits(from_pretrained(hub.folders["gpt2"], tokenizer=False)))
    assert leftovers(cache) == [f"models--acme--flaky/snapshots/{loaded.path.name}/model.safetensors"]


def test_hf_token_opens_a_gated_repo(hub: Hub, cache: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    loaded = from_pretrained("acme/gated", tokenizer=False)
    np.testing.assert_array_equal(logits(loaded), logits(from_pretrained(hub.folders["gpt2"], tokenizer=False)))


@pytest.mark.parametrize("repo, message", [
    ("acme/truncated", r"model acme/truncated@main file 'model.safetensors': the download from http://127.0.0.1:\d+ "
                       r"failed .*nothing half-written is kept: retry"),
    ("acme/corrupt", r"model acme/corrupt@main file 'model.safetensors': the downloaded file has its SHA-256 is not "
                     r"the hub's .*; it was deleted, not loaded"),
    ("acme/missing", r"model acme/missing@main: http://127.0.0.1:\d+ has no repo 'acme/missing' \(or it is private: "
                     r"set HF_TOKEN"),
    ("acme/gated", r"model acme/gated@main file 'config.json': the repo is gated on .*set HF_TOKEN"),
    ("acme/stalls", r"model acme/stalls@main: http://127.0.0.1:\d+ did not answer in time \(ReadTimeout\); retry"),
    ("acme/bin-only", r"model acme/bin-only@main has only pickled weights \(pytorch_model.bin\), which lenscope never "
                      r"loads"),
    ("acme/tiny-llama@v9", r"model acme/tiny-llama@v9: http://127.0.0.1:\d+ has no revision 'v9'"),
])
def test_a_faulty_hub_exits_2_with_a_clear_line_and_leaves_no_half_file(hub: Hub, cache: Path, tmp_path: Path,
                                                                        repo: str, message: str) -> None:
    result = run_cli("run", "lm/eval", f"model/pretrained={repo}", f"data/text={text_file(tmp_path)}",
                     "--store", str(tmp_path / "runs"), cwd=tmp_path, env=dict(os.environ))
    assert result.rc == 2, result.err
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert __import__("re").search(message, result.err), result.err
    assert leftovers(cache) == []
    assert not list(cache.glob("models--*/refs/*"))  # no revision that looks complete


def _fetch(queue) -> None:
    """In a forked process: fetch acme/slow and report its folder, or the error."""
    from lenscope.models.hub import fetch_checkpoint

    try:
        queue.put(str(fetch_checkpoint("acme/slow")))
    except Exception as err:  # reported to the test, which fails with it
        queue.put(f"error: {err!r}")


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # the children run no JAX: HTTP and files only
def test_two_first_downloads_at_once_both_succeed(hub: Hub, cache: Path, monkeypatch) -> None:
    """Two processes (forked: the download code is what runs, not a second JAX import) fetch one repo at once."""
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    runs = [context.Process(target=_fetch, args=(queue,)) for _ in range(2)]
    for run in runs:
        run.start()
    folders = [queue.get(timeout=120) for _ in runs]
    for run in runs:
        run.join(timeout=60)
    assert [run.exitcode for run in runs] == [0, 0] and folders[0] == folders[1], folders
    folder = Path(folders[0])
    assert (folder / "model.safetensors").read_bytes() == (hub.folders["gpt2"] / "model.safetensors").read_bytes()
    assert leftovers(cache) == [f"models--acme--slow/snapshots/{folder.name}/model.safetensors"]
