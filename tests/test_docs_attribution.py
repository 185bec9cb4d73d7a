"""docs/attribution.md stays runnable: its Python blocks run in order, with short training runs in a temporary
folder (the figures in the doc come from the full runs it shows)."""

from __future__ import annotations

from doc_blocks import DOCS, run_doc


def test_attribution_docs_examples_run(tmp_path, capsys):
    run_doc(DOCS / "attribution.md", {"/tmp/lenscope-attribution-demo": str(tmp_path),
                                      # no checkpoint analyses (summary, Fourier, attention plots) and no
                                      # validation passes: nothing below reads them
                                      "training/steps=1500": 'training/steps=40", "training/analyze=false',
                                      "training/steps=3000": "training/steps=40",
                                      "logging/validation_interval=500": "logging/validation_interval=0",
                                      "logging/checkpoint_interval=1500": "logging/checkpoint_interval=40",
                                      "logging/validation_interval=1000": "logging/validation_interval=0",
                                      "logging/checkpoint_interval=3000": "logging/checkpoint_interval=40",
                                      "training/steps=2000": "training/steps=80",
                                      "logging/checkpoint_interval=2000": "logging/checkpoint_interval=80"},
            min_blocks=3)
    out = capsys.readouterr().out
    assert "replacement " in out and ", completeness " in out
    assert "key frequencies: [" in out and "feature " in out and ", frequency " in out
    assert "('compute_attribution_graph', 'compute_attribution_graph.parquet')" in out
    assert "decoder {'appears': " in out  # the two checkpoints' graphs compared, features matched by decoder
