"""What a new user's screenshots showed, each fixed: a crosscoder's read checkpoints as one chip (not one 'branch of'
per checkpoint) and counted as one branch, a long value folded inside its column, and `lenscope show` cutting a
20 KB value on its line."""

from __future__ import annotations

import pytest
from cli_runner import run_cli
from ui_fixtures import ui_client

from lenscope.store import Store

FILES = ";".join(f"/usr/lib/python3.11/site-packages/package_{i}/module_{i}.py" for i in range(80))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("cosmetics") / "runs"
    with Store(root) as opened:
        model = opened.tick(opened.new_node("demo/train"), count=4)
        checkpoints = [opened.get(f"{model.name}@{model.nonce}:{seq}").node for seq in (1, 2, 3, 4)]
        crosscoder = opened.tick(opened.new_node("demo/crosscoder", parents=checkpoints), count=2)
        opened.record(crosscoder, {"data/files": FILES, "train/loss": 1.5})
        for node in (model, crosscoder):
            opened.set_status(node, "done")
    return root, model, crosscoder


def test_a_crosscoders_checkpoints_are_one_chip_and_one_branch(store):
    root, model, crosscoder = store
    client = ui_client(str(root))
    try:
        page = next(client)
        runs = page.get("/").text
        assert "reads 4 checkpoints of" in runs and "branch of" not in runs and "1 branch<" in runs
        model_page = page.get(f"/run/{model.name}@{model.nonce}").text
        assert model_page.count("branched at") == 0 and "reads 4 checkpoints" in model_page  # was: 4 chips
        rows = {row["lineage"]: row for row in page.get("/api/runs").json()}
        assert rows[f"{model.name}@{model.nonce}"]["branches"] == 1
    finally:
        next(client, None)


def test_a_long_value_is_folded_on_the_node_page(store):
    root, _, crosscoder = store
    client = ui_client(str(root))
    try:
        page = next(client).get(f"/node/{crosscoder}").text
        assert '<details class="long">' in page and f"({len(FILES)} characters)" in page
    finally:
        next(client, None)


def test_show_cuts_a_long_value_on_its_line(store):
    root, _, crosscoder = store
    done = run_cli("show", str(crosscoder), "--store", str(root), cwd=root.parent)
    line = next(line for line in done.out.splitlines() if "data/files" in line)
    assert len(line) < 300 and f"({len(FILES)} characters; show --json prints it whole)" in line
    whole = run_cli("show", str(crosscoder), "--json", "--store", str(root), cwd=root.parent)
    assert FILES in whole.out
