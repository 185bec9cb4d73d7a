"""Attribution graphs compared across checkpoints (attribution/compare.py, compare_op.py): a graph against itself
changes nothing; two checkpoints' graphs give the appear/vanish sets a direct set computation gives, features matched
through their transcoders' decoders; a transcoder whose latents are permuted is matched back, so its graph shows no
change; the op saves the same table on its node."""

from __future__ import annotations

import json

import numpy as np
import pytest
from compare_fixtures import GRAPH, graph_params, two_checkpoints

import lenscope
from lenscope.attribution import (
    Correspondence,
    compare_graph_files,
    compare_graphs,
    latent_correspondence,
    load_transcoders,
)
from lenscope.attribution.compare import COLUMNS, summary
from lenscope.dictionaries import match_decoders
from lenscope.errors import UsageError
from lenscope.examples.grokking import GrokTrainer


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return two_checkpoints(tmp_path_factory.mktemp("compare"))


@pytest.fixture(scope="module")
def transcoders(run):
    with lenscope.Store(run.store) as store:
        return [load_transcoders(node, store) for node in run.transcoders]


def _where(run, k: int, name: str = GRAPH) -> str:
    return f"{run.checkpoints[k]}/{name}"


def _rows(table, item: str, status: str) -> set[str]:
    column = "node_b" if status == "appears" else "node_a"
    return {table[column][i] for i in range(len(table["item"]))
            if table["item"][i] == item and table["status"][i] == status}


def test_a_graph_compared_with_itself_changes_nothing(run):
    for document in run.graphs:
        table = compare_graphs(document, document)
        assert list(table) == list(COLUMNS)
        assert set(table["status"]) == {"kept"} and not any(np.asarray(table["change"]))
        assert table["node_a"] == table["node_b"] and all(table["in_a"]) and all(table["in_b"])
        counts = summary(table)
        assert counts["nodes"]["kept"] == len(document["nodes"]) and counts["edges"]["kept"] == len(document["links"])
    same = compare_graph_files(run.store, _where(run, 1), _where(run, 1))
    assert same.match == "identity"  # one file names one transcoder node: latent i is latent i
    assert summary(same.table)["nodes"]["appears"] == summary(same.table)["nodes"]["vanishes"] == 0


def _keys(document, mapped=None) -> tuple[dict, dict]:
    """The direct computation: node id -> (kind, layer, pos, latent or token), a feature's latent carried by
    `mapped` (layer -> array, -1 none); and (source key, target key) -> id of each link."""
    keys = {}
    for node in document["nodes"]:
        kind, pos = node["feature_type"], int(node["ctx_idx"])
        parts = node["node_id"].split("_")
        if kind == "cross layer transcoder":
            layer, latent = int(node["layer"]), int(parts[1])
            if mapped is not None:
                latent = int(mapped[layer][latent]) if mapped[layer][latent] >= 0 else ("none", latent)
            keys[node["node_id"]] = ("feature", layer, pos, latent)
        else:
            keys[node["node_id"]] = (kind, node["layer"], pos, parts[1])
    links = {(keys[link["source"]], keys[link["target"]]): f"{link['source']} -> {link['target']}"
             for link in document["links"] if link["weight"] != 0}
    return keys, links


def test_two_checkpoints_appear_and_vanish_as_a_direct_set_computation_says(run, transcoders):
    compared = compare_graph_files(run.store, _where(run, 0), _where(run, 1))
    assert compared.match == "decoder" and (compared.a.node, compared.b.node) == tuple(
        lenscope.Node.parse(c) for c in run.checkpoints)
    indices, similarity = match_decoders(transcoders[0][0], transcoders[1][0])
    mapped = {0: np.where(similarity >= 0.7, indices, -1)}
    keys_a, links_a = _keys(run.graphs[0], mapped)
    keys_b, links_b = _keys(run.graphs[1])
    table = compared.table
    assert _rows(table, "node", "appears") == {i for i, k in keys_b.items() if k not in set(keys_a.values())}
    assert _rows(table, "node", "vanishes") == {i for i, k in keys_a.items() if k not in set(keys_b.values())}
    assert _rows(table, "edge", "appears") == {i for k, i in links_b.items() if k not in links_a}
    assert _rows(table, "edge", "vanishes") == {i for k, i in links_a.items() if k not in links_b}
    statuses = summary(table)
    assert statuses["nodes"]["appears"] > 0 and statuses["nodes"]["vanishes"] > 0  # the checkpoints differ
    features = [i for i, kind in enumerate(table["kind"])
                if kind == "feature" and table["in_a"][i] and table["in_b"][i]]
    assert features  # and some features live on, matched through the decoders
    for i in features:
        assert table["latent_b"][i] == indices[table["latent_a"][i]]
        assert table["similarity"][i] == pytest.approx(similarity[table["latent_a"][i]])
    change, item = np.abs(table["change"]), np.asarray(table["item"])
    assert list(item) == sorted(item, key=["node", "edge"].index)  # nodes, then edges
    for part in ("node", "edge"):  # each by |change|, largest first
        assert np.all(np.diff(change[item == part]) <= 0)


def _permuted(dictionary, order):
    """The same dictionary with its latents reordered: latent j of the result is latent order[j]."""
    return dictionary.replace(W_enc=dictionary.W_enc[:, order], b_enc=dictionary.b_enc[order],
                              W_dec=dictionary.W_dec[order], threshold=dictionary.threshold[order])


def test_a_permuted_transcoder_is_matched_back_and_its_graph_shows_no_change(run, transcoders):
    original = transcoders[1]
    order = np.random.default_rng(0).permutation(original[0].W_dec.shape[0])
    permuted = [_permuted(original[0], order)]
    trainer = GrokTrainer(run.model_args, base=run.checkpoints[1], store=run.store)
    trainer.run_analysis(lenscope.AnalysisCfg(analysis=GRAPH, name="permuted_graph", params=graph_params(permuted)))
    trainer.cleanup()
    compared = compare_graph_files(run.store, _where(run, 1), _where(run, 1, "permuted_graph"),
                                   transcoders_b=permuted)
    table = compared.table
    assert compared.match == "decoder"
    assert set(table["status"]) == {"kept"} and all(table["in_a"]) and all(table["in_b"])
    np.testing.assert_allclose(table["change"], 0.0, atol=1e-5)
    features = [i for i, kind in enumerate(table["kind"]) if kind == "feature"]
    assert features and all(order[table["latent_b"][i]] == table["latent_a"][i] for i in features)
    assert any(table["node_a"][i] != table["node_b"][i] for i in features)  # the ids differ: the latents moved
    np.testing.assert_allclose([table["activation_b"][i] for i in features],
                               [table["activation_a"][i] for i in features], rtol=1e-5)
    identity = compare_graph_files(run.store, _where(run, 1), _where(run, 1, "permuted_graph"), match="identity")
    assert summary(identity.table)["nodes"]["appears"] > 0  # matched by index, the same features look new


def test_the_op_saves_the_table_on_its_node(run):
    trainer = GrokTrainer(run.model_args, base=run.checkpoints[1], store=run.store)
    out = trainer.run_analysis(lenscope.AnalysisCfg(analysis="compare_attribution_graphs",
                                                    params={"graph_a": _where(run, 0)}))
    trainer.cleanup()
    entry = out.entry("compare_attribution_graphs")
    assert entry.artifacts == ("compare_attribution_graphs", "compare_attribution_graphs.parquet")
    expected = compare_graph_files(run.store, _where(run, 0), _where(run, 1)).table
    saved = lenscope.load_table(run.store, run.checkpoints[1], "compare_attribution_graphs")
    assert saved.column_names == list(COLUMNS) and saved.num_rows == len(expected["item"])
    for name in ("item", "kind", "node_a", "node_b", "status", "latent_a", "latent_b", "in_a", "in_b"):
        assert saved[name] == expected[name], name
    np.testing.assert_allclose(np.asarray(saved["change"], float), expected["change"])
    with lenscope.Store(run.store) as store:
        saved_summary = json.loads(store.artifact(run.checkpoints[1], "compare_attribution_graphs").content)
        values = store.values(run.checkpoints[1])
    assert saved_summary["graph_a"] == _where(run, 0) and saved_summary["graph_b"] == _where(run, 1)
    assert saved_summary["match"] == "decoder" and saved_summary["table"] == "compare_attribution_graphs.parquet"
    assert saved_summary["nodes"] == summary(expected)["nodes"]
    assert values["analysis/compare_attribution_graphs/nodes/appears"] == saved_summary["nodes"]["appears"]


def test_bad_input_is_refused_naming_what_was_expected(run):
    trainer = GrokTrainer(run.model_args, base=run.checkpoints[1], store=run.store)
    with pytest.raises(UsageError, match="needs graph_a=NODE/NAME"):
        trainer.run_analysis(lenscope.AnalysisCfg(analysis="compare_attribution_graphs"))
    trainer.cleanup()
    with pytest.raises(UsageError, match=r"no graph artifact 'compute_attribution_grap'.*did you mean "
                                         r"compute_attribution_graph"):
        compare_graph_files(run.store, _where(run, 0, "compute_attribution_grap"), _where(run, 1))
    with pytest.raises(UsageError, match=r"'compute_attribution_graph.parquet' on .* is not an attribution graph"):
        compare_graph_files(run.store, _where(run, 0, f"{GRAPH}.parquet"), _where(run, 1))
    with pytest.raises(UsageError, match="match='decoders': expected one of auto, decoder, identity"):
        compare_graph_files(run.store, _where(run, 0), _where(run, 1), match="decoders")
    with pytest.raises(UsageError, match="expected NODE/NAME"):
        compare_graph_files(run.store, GRAPH, _where(run, 1))
    unnamed = {**run.graphs[0], "metadata": {**run.graphs[0]["metadata"], "scan": "lenscope"}}
    with lenscope.Store(run.store) as store:
        store.put_artifacts([(run.checkpoints[0], "unnamed", "unnamed.json", json.dumps(unnamed).encode())])
    with pytest.raises(UsageError, match="does not name its transcoders' node.*pass transcoders_a=NODE"):
        compare_graph_files(run.store, _where(run, 0, "unnamed"), _where(run, 1))
    with pytest.raises(UsageError, match="maps latents 0 and 1 of A to latent 5 of B: it must be one-to-one"):
        Correspondence.of({0: [5, 5, 2]})
    with pytest.raises(UsageError, match="min_similarity is a cosine similarity"):
        latent_correspondence([], [], min_similarity=2)
    with pytest.raises(UsageError, match="no layer 0"):
        compare_graphs(run.graphs[0], run.graphs[1], Correspondence.of({1: [0]}))
