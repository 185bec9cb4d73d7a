"""docs/lineage.md stays runnable: its Python blocks run in order in a temporary folder."""

from __future__ import annotations

import pytest
from doc_blocks import DOCS, run_doc


@pytest.mark.slow  # a model with three checkpoints, a crosscoder over them, an SAE at two of them
def test_lineage_docs_examples_run(tmp_path, capsys):
    namespace = run_doc(DOCS / "lineage.md", {"/tmp/lenscope-lineage-demo": str(tmp_path)}, min_blocks=4)
    out = capsys.readouterr().out
    assert "[20, 40, 60]\n[20, 40, 60]\n20,40,60 True\n" in out
    assert "128 ['latent', 'density', 'share_step_20', 'share_step_40', 'share_step_60']\n" in out
    assert "True True\n" in out
    assert "True True\n64 {100} {None}\n" in out
    kept, tracks = namespace["kept"], namespace["tracks"]
    assert 0 < len(kept) < 128 and all(s >= 0.7 for t in kept for s in t.similarity)
    born = len(tracks) - 128  # tracks beyond the 128 of step 40 start at step 60
    assert f"\n{len(kept)} {born}\n" in out and len(kept) + born == 128  # each latent of 60 on one track
    # the op feature_tracks: the same tracks from the store, as a table and values on step 60's node
    assert out.rstrip().endswith(f"True {born} [40, 60]")
    table = namespace["table"]
    assert len(table) == sum(len(t.latents) for t in tracks)
    alive = {(row["track"], row["step"]): row for row in table}
    for index, track in enumerate(tracks):
        for step, latent in track.latents.items():
            row = alive[(index, step)]
            assert row["latent"] == latent and row["birth"] == track.birth
            assert row["death"] == (-1 if track.death is None else track.death)
