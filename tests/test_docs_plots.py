"""docs/plots.md runs as written and makes an image for every helper it documents."""

from __future__ import annotations

from doc_blocks import DOCS, run_doc

from lenscope import plots


def test_plot_docs_run_and_render_each_helper(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_doc(DOCS / "plots.md", min_blocks=6)
    made = sorted(p.stem for p in (tmp_path / "docs" / "img").glob("*.png"))
    helpers = ["bar", "heatmap", "heatmaps", "line", "scatter"]
    assert made == helpers
    assert all((DOCS / "img" / f"{name}.png").is_file() for name in helpers)  # the committed previews
    text = (DOCS / "plots.md").read_text()
    for name in helpers:  # every keyword argument of every helper is in its table
        for arg in getattr(plots, name).__code__.co_varnames[:getattr(plots, name).__code__.co_argcount
                                                              + getattr(plots, name).__code__.co_kwonlyargcount]:
            assert f"`{arg}`" in text, (name, arg)
