"""Config as a first-class column: `config/...` keys in where/sort/select on both backends, `ls` and `diff`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pg_server import postgres_server, postgres_url  # noqa: F401
from store_fixtures import backend, store, store_url  # noqa: F401

from lenscope.cli.main import main
from lenscope.errors import UsageError
from lenscope.store import Store

CONFIGS = [
    {"optimization": {"weight_decay": 0.1, "lr": 1e-3}, "model": {"kind": "mlp"}, "training": {"analyze": True}},
    {"optimization": {"weight_decay": 1, "lr": 1e-3}, "model": {"kind": "attn"}, "training": {"analyze": False}},
    {"optimization": {"weight_decay": 2.0, "lr": 3e-3}, "model": {"kind": "mlp"}, "training": {"analyze": True}},
]


def populate(store: Store) -> list:
    """Three two-node lineages that differ in config; val/accuracy on the last node."""
    lasts = []
    for i, config in enumerate(CONFIGS):
        first = store.new_node("sweep/job", config=config)
        store.record(first, {"train/loss": 3.0 - i})
        last = store.tick(first)
        store.record(last, {"val/accuracy": 0.25 * (i + 1)})
        lasts.append(last)
    store.new_node("other", config=None)  # a node without config matches no config condition
    return lasts


def test_config_leaves_filter_sort_and_select_like_values(store: Store) -> None:
    lasts = populate(store)
    q = store.query()
    one = q.where("config/optimization/weight_decay", "==", 1).where("seq", "==", 1).select()
    assert [r["node"] for r in one] == [str(lasts[1])] and one[0]["config/optimization/weight_decay"] == 1
    assert q.where("config/optimization/weight_decay", ">", 0.5).count() == 4  # two nodes of two lineages
    assert q.where("config/model/kind", "==", "mlp").where("seq", "==", 1).count() == 2
    assert q.where("config/model/kind", "like", "at%").count() == 2
    assert q.where("config/model/kind", "in", ["attn", "none"]).count() == 2
    assert q.where("config/training/analyze", "==", True).count() == 4
    assert q.where("config/optimization/weight_decay", "==", "1").count() == 0  # text never equals a number
    assert q.where("config/optimization/nothing", "!=", None).count() == 0  # a missing path matches nothing
    rows = q.seq(1).sort("config/optimization/weight_decay", ascending=False).select(["val/accuracy"])
    assert [r["config/optimization/weight_decay"] for r in rows] == [2.0, 1, 0.1]
    assert [r["val/accuracy"] for r in rows] == [0.75, 0.5, 0.25]
    picked = q.seq(1).select(["config/optimization/lr", "config/model"])
    assert picked[0]["config/optimization/lr"] == 1e-3 and picked[0]["config/model"] == {"kind": "mlp"}
    latest = q.where("config/model/kind", "==", "mlp").latest(["val/accuracy"])
    assert latest["node"] == str(lasts[2]) and latest["config/model/kind"] == "mlp"
    with pytest.raises(UsageError, match="bad config key"):
        q.where("config/", "==", 1)


def test_ls_where_keys_and_sort_on_config(tmp_path: Path, capsys) -> None:
    root = tmp_path / "runs"
    with Store(root) as opened:
        populate(opened)
    # Finding 1: `ls --where optimization/weight_decay == 1` said "no value key"; config/... is the spelling.
    assert main(["--store", str(root), "ls", "--where", "config/optimization/weight_decay", "==", "1",
                 "--keys", "val/accuracy,config/optimization/weight_decay", "--latest"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["node", "status", "val/accuracy", "config/optimization/weight_decay"]
    assert lines[1].split()[2:] == ["0.5", "1"]
    assert main(["--store", str(root), "ls", "--seq", "1", "--sort", "config/optimization/weight_decay",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["config/optimization/weight_decay"] for r in rows] == [0.1, 1, 2.0]
    assert main(["--store", str(root), "ls", "--where", "config/optimization/weight_dacay", "==", "1"]) == 2
    err = capsys.readouterr().err
    assert "no config key 'config/optimization/weight_dacay' (did you mean config/optimization/weight_decay" in err


def test_diff_shows_differing_config_and_final_values(tmp_path: Path, capsys) -> None:
    root = tmp_path / "runs"
    with Store(root) as opened:
        lasts = populate(opened)
    a, b = (f"{n.name}@{n.nonce}" for n in lasts[:2])
    assert main(["--store", str(root), "diff", a, str(lasts[1]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["nodes"] == [str(lasts[0]), str(lasts[1])]  # a run NAME@NONCE means its latest node
    assert data["config"] == {"config/model/kind": ["mlp", "attn"], "config/optimization/weight_decay": [0.1, 1],
                              "config/training/analyze": [True, False]}  # lr is the same: left out
    assert data["values"] == {"train/loss": [3.0, 2.0], "val/accuracy": [0.25, 0.5]}  # the latest up to the node
    assert main(["--store", str(root), "diff", a, b]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["key", str(lasts[0]), str(lasts[1])]
    assert ["config/optimization/weight_decay", "0.1", "1"] in [line.split() for line in table]
    assert main(["--store", str(root), "diff", a, b, "--all", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["config/optimization/lr"] == [1e-3, 1e-3]
    assert main(["--store", str(root), "diff", a]) == 2
    assert "diff needs at least two runs" in capsys.readouterr().err
    assert main(["--store", str(root), "diff", a, "sweep.job@ffffff"]) == 2
    assert "no run 'sweep.job@ffffff'" in capsys.readouterr().err


def test_a_config_path_given_as_a_value_key_says_its_spelling(tmp_path: Path, capsys) -> None:
    root = tmp_path / "runs"
    with Store(root) as opened:
        populate(opened)
    assert main(["--store", str(root), "ls", "--where", "optimization/weight_decay", "==", "1"]) == 2
    assert "'optimization/weight_decay' is a config path, not a value key; query it as config/optimization/" \
           "weight_decay" in capsys.readouterr().err
    assert main(["--store", str(root), "ls", "--seq", "1", "--keys", "val/accuracy,optimization/weight_decay"]) == 0
    assert "--keys optimization/weight_decay: no row has it; it is a config path: use " \
           "config/optimization/weight_decay" in capsys.readouterr().err
