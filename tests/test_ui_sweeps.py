"""The sweep pages through Starlette's test client, on SQLite and PostgreSQL: Optuna's storage opened read-only (the
database refuses writes), nothing made in a store without sweeps, a hostile study name escaped everywhere."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from pg_server import postgres_server  # noqa: F401
from sqlalchemy import inspect
from starlette.testclient import TestClient
from ui_fixtures import ESCAPED, XSS, store_url, ui_client
from xor_job import XOR_JOB

from lenscope.store import Store
from lenscope.sweeps import SweepSpec, create, run_trials
from lenscope.ui import sweep_data
from lenscope.ui.app import create_app
from lenscope.ui.readonly import ReadOnlyStore
from lenscope.ui.sweep_tags import recorded_state

optuna = pytest.importorskip("optuna", reason="sweeps need Optuna: pip install -e '.[sweep]'")

BASE = ["training/steps=4", "logging/validation_interval=2", "logging/checkpoint_interval=0", "training/analyze=false"]


def _url(kind: str, tmp, request) -> str:
    return store_url(kind, tmp, request.getfixturevalue("postgres_server") if kind == "postgresql" else None)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def swept(request, tmp_path_factory) -> str:
    """A store holding a two-trial grid sweep of the XOR job whose study is named like a script tag."""
    tmp = tmp_path_factory.mktemp(request.param)
    (tmp / "xor.py").write_text(XOR_JOB)
    url = _url(request.param, tmp, request)
    with Store(url) as store:
        spec = SweepSpec(job=f"{tmp / 'xor.py'}:Xor", sources=BASE, params=["optimization/lr=choice:0.05,0.01"],
                         objective="val/loss:min", sampler="grid", pruner="none", trials=2)
        run_trials(store, create(store, spec, XSS), spec, say=lambda text: None)
    return url


@pytest.fixture(scope="module")
def client(swept):
    yield from ui_client(swept)


def test_sweep_pages_list_the_trials_and_escape_the_study_name(client):
    listing = client.get("/sweeps")
    assert listing.status_code == 200 and XSS not in listing.text and ESCAPED in listing.text
    address = f"/sweep/{quote(XSS, safe='')}"
    assert f'href="{address}"' in listing.text
    page = client.get(address)
    assert page.status_code == 200, page.text[-500:]
    assert XSS not in page.text and page.text.count('class="trial complete') == 2
    assert "Param importance" in page.text and page.text.count('<figure class="plot"') == 2  # lr, best so far
    runs = client.get("/").text
    assert XSS not in runs and runs.count(f'href="{address}"') == 2  # each trial's run links its sweep
    assert client.get("/sweep/nope").status_code == 404


def test_optuna_storage_is_opened_read_only(swept):
    handle = ReadOnlyStore.open(swept)
    try:
        storage = sweep_data.storage(handle)
        study = storage.get_study_id_from_name(XSS)
        with pytest.raises(optuna.exceptions.StorageInternalError):
            storage.set_study_user_attr(study, "written", True)
        assert "written" not in storage.get_study_user_attrs(study)
    finally:
        handle.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_store_without_sweeps_gets_no_optuna_tables(kind, tmp_path, request):
    url = _url(kind, tmp_path, request)
    Store(url).close()
    app = create_app(url)
    with TestClient(app) as client:
        assert "No sweeps in this store yet" in client.get("/sweeps").text
        assert client.get("/sweep/any").status_code == 404
    app.state.ui.store.close()
    with Store(url, readonly=True) as store, store.read() as connection:
        assert not inspect(connection).has_table("studies")
    assert not (tmp_path / "store" / "optuna.db").exists()


def test_a_complete_trial_without_an_objective_number_reads_as_failed():
    # what `lenscope sweep` recorded before it recorded `failed`: Optuna failed the trial, its node said complete
    assert recorded_state("complete", None) == "failed" and recorded_state("complete", 0.5) == "complete"
    assert recorded_state("pruned", None) == "pruned"
