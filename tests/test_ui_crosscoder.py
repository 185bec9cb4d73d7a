"""The crosscoder timeline page (`/crosscoder/NODE/crosscoder.parquet`) through Starlette's test client, on SQLite and
PostgreSQL, over a hand-made store: a 4096-latent crosscoder over 10 checkpoints stays under 1 MB with its rows capped
and ordered by birth as computed here from the same table; dead latents come last; links from the node, run and
table pages; a branched crosscoder finds the checkpoints its first lineage read; escaping and 404s."""

from __future__ import annotations

import re

import pytest
from crosscoder_tables import HOSTILE, crosscoder_table, drawn_rows, expected_rows, other_table
from pg_server import postgres_server  # noqa: F401
from ui_fixtures import store_url, ui_client

from lenscope.store import Node, Store
from lenscope.ui.crosscoder_data import BIRTH_FRACTION, MAX_ROWS, birth

STEPS = [100 * (i + 1) for i in range(10)]


class Built:
    """The hand-made store: a model lineage, a big crosscoder over its 10 checkpoints, a small one, a branch."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.big, self.small = crosscoder_table(4096, STEPS, 0), crosscoder_table(40, STEPS[:3], 1, dead=0.3)
        with Store(url) as store:
            first = store.new_node("demo/train")
            store.tick(first, count=STEPS[-1])
            lineage = [Node(first.name, first.nonce, seq) for seq in range(STEPS[-1] + 1)]
            store.record_many([(n, {"train/loss": 3.0 / (1 + n.seq), "val/accuracy": n.seq / STEPS[-1]})
                               for n in lineage[10::10]])
            for step in STEPS:
                store.mark_checkpoint(lineage[step], store.checkpoint_dir(lineage[step]), step=step)
            self.model = lineage[-1]
            self.big_node = store.tick(store.new_node("demo/crosscoder", parents=[lineage[s] for s in STEPS]))
            store.put_artifacts([(self.big_node, "crosscoder.parquet", "crosscoder.parquet", self.big),
                                 (self.big_node, HOSTILE, "x.parquet", self.small),
                                 (self.big_node, "other.parquet", "other.parquet", other_table()),
                                 (self.big_node, "broken.parquet", "broken.parquet", b"PAR1 not parquet")])
            self.small_node = store.tick(store.new_node("demo/crosscoder", parents=[lineage[s] for s in STEPS[:3]]))
            store.put_artifact(self.small_node, "crosscoder.parquet", "crosscoder.parquet", self.small)
            self.branch = store.tick(store.new_node("demo/crosscoder", parents=[self.big_node]))
            store.put_artifact(self.branch, "crosscoder.parquet", "crosscoder.parquet", self.big)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def built(request, tmp_path_factory) -> Built:
    server = request.getfixturevalue("postgres_server") if request.param == "postgresql" else None
    return Built(store_url(request.param, tmp_path_factory.mktemp(request.param), server))


@pytest.fixture(scope="module")
def client(built):
    yield from ui_client(built.url)


def timeline(node: Node, name: str = "crosscoder.parquet") -> str:
    return f"/crosscoder/{node}/{name}"


def test_a_4096_latent_crosscoder_over_10_checkpoints_stays_under_1_mb_with_rows_capped_by_birth(client, built):
    response = client.get(timeline(built.big_node))
    assert response.status_code == 200 and len(response.content) < 1_000_000, len(response.content)
    html = response.text
    latents, births = drawn_rows(html)
    assert (latents, births) == expected_rows(built.big) and len(latents) == MAX_ROWS
    assert births == sorted(births) and len(set(births)) == len(STEPS)  # every checkpoint gives births
    cells = re.findall(r'<rect class="cell v\d+(?: born)?" x="[\d.]+" width=', html)
    assert len(cells) == MAX_ROWS * len(STEPS)
    assert len(re.findall(r'class="cell v\d+ born"', html)) == MAX_ROWS  # one birth cell per row
    assert f"Showing {MAX_ROWS} of 4096 latents" in html and "The full table" in html
    assert f"at least <b>{BIRTH_FRACTION / len(STEPS):.3g}</b>" in html  # the threshold, stated
    for key in ("train/loss", "val/accuracy"):  # both curves, on the grid's x frame
        assert f'data-label="{key}"' in html
    assert len(set(re.findall(r"data-frame='\[([-\d.e]+), ([-\d.e]+),", html))) == 1
    assert html.count('class="ckpt" data-step=') == 3 * len(STEPS)  # two charts and the grid mark each checkpoint
    norm = client.get(timeline(built.big_node) + "?view=norm")
    assert norm.status_code == 200 and drawn_rows(norm.text) == (latents, births) and "largest norm" in norm.text


def test_dead_latents_come_last_and_rows_link_their_row_on_the_table_page(client, built):
    html = client.get(timeline(built.small_node)).text
    latents, births = drawn_rows(html)
    assert (latents, births) == expected_rows(built.small) and len(latents) == 40 and "Showing" not in html
    dead = re.findall(r'<g class="row dead" data-latent="(\d+)"', html)
    assert dead and [str(t) for t in latents[-len(dead):]] == dead
    links = re.findall(r'<a href="(/view/[^"]+)"><g class="row', html)
    assert len(links) == 40
    row = latents.index(37)  # latent 37 is the table's row 37 (page 0 of 50 rows)
    link = links[row].replace("&amp;", "&")
    assert link.endswith("&page=0#row-37")
    view = client.get(link.split("#")[0]).text
    assert re.search(r'<tr id="row-37"><td class="muted">37</td><td>37</td>', view)
    big = client.get(timeline(built.big_node)).text
    far = re.findall(r'<a href="([^"]+)"><g class="row[^"]*" data-latent="(\d+)"', big)
    href, latent = next((h, int(t)) for h, t in far if int(t) >= 100)
    assert href.replace("&amp;", "&").endswith(f"&page={latent // 50}#row-{latent}")


def test_the_node_run_and_branch_pages_reach_the_timeline(client, built):
    node_page = client.get(f"/node/{built.big_node}").text
    assert f'href="/crosscoder/{built.big_node.address.replace("@", "%40").replace(":", "%3A")}/crosscoder.parquet' \
           f'?version=1">latents over checkpoints</a>' in node_page
    run_page = client.get(f"/run/{built.model.name}@{built.model.nonce}").text
    for reader in (built.big_node, built.small_node):  # each crosscoder that read its checkpoints, at its last node
        assert f'href="/crosscoder/{reader.address.replace("@", "%40").replace(":", "%3A")}/crosscoder.parquet"' \
               in run_page
    branch = client.get(timeline(built.branch)).text  # a branch of a crosscoder: the checkpoints its first one read
    assert f'read checkpoints of <a class="addr" href="/run/{built.model.name}%40{built.model.nonce}"' in branch
    assert 'data-label="train/loss"' in branch
    assert f'<a href="/node/{built.model.name}%40{built.model.nonce}%3A500"><text class="tick step"' in branch


def test_hostile_names_are_escaped_and_what_is_no_crosscoder_table_is_a_404(client, built):
    response = client.get(timeline(built.big_node, HOSTILE))
    assert response.status_code == 200 and "<img src=x" not in response.text and "&lt;img src=x" in response.text
    assert "not a crosscoder table" in client.get(timeline(built.big_node, "other.parquet")).text
    for url in (timeline(built.big_node, "other.parquet"), timeline(built.big_node, "broken.parquet"),
                timeline(built.big_node, "nothing.parquet"),
                timeline(built.big_node) + "?version=9", timeline(built.big_node) + "?version=" + "9" * 5000,
                "/crosscoder/not-a-node/crosscoder.parquet"):
        answer = client.get(url)
        assert answer.status_code == 404 and "Traceback" not in answer.text, url


def test_birth_is_the_first_checkpoint_reaching_the_threshold():
    assert birth((0.0, 0.2, 0.8), 0.5 / 3) == 1 and birth((0.5, 0.5), 0.25) == 0
    assert birth((0.1, 0.1, 0.8), 0.5 / 3) == 2  # shares sum to 1: some checkpoint always reaches 0.5 / N
