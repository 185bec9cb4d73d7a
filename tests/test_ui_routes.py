"""`lenscope ui` routes through Starlette's test client, on SQLite and PostgreSQL: pages, escaping, exact bytes,
404/405, read-only handle, live stamps; plus the chart helpers and the CLI's refusals."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from pg_server import postgres_server  # noqa: F401
from sqlalchemy import insert
from ui_fixtures import ESCAPED, XSS, build, store_url, ui_client

from lenscope.cli.main import main
from lenscope.errors import StoreError, UsageError
from lenscope.store import Store
from lenscope.store.schema import records
from lenscope.ui.series import load_curves
from lenscope.ui.server import is_loopback, listen
from lenscope.ui.svg import Line, chart, nice_ticks


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def built(request, tmp_path_factory):
    """The hand-made store of ui_fixtures, once per backend."""
    server = request.getfixturevalue("postgres_server") if request.param == "postgresql" else None
    return build(store_url(request.param, tmp_path_factory.mktemp(request.param), server))


@pytest.fixture(scope="module")
def client(built):
    yield from ui_client(built.url)


def lineage(node) -> str:
    return f"{node.name}@{node.nonce}"


def pages(built) -> list[str]:
    train = built.train
    return ["/", f"/run/{lineage(train)}", f"/run/{lineage(train)}?log=1&with={lineage(built.branch)}",
            f"/node/{train}", f"/node/{train.name}@{train.nonce}:10", f"/node/{built.branch}",
            f"/view/{train}/probe?page=1", "/api/runs"]


def test_every_page_renders_and_escapes_every_stored_string(client, built):
    for url in pages(built):
        response = client.get(url)
        assert response.status_code == 200, (url, response.text[-500:])
        if url == "/api/runs":  # JSON carries the strings as they are; nosniff keeps browsers from reading HTML
            assert response.headers["content-type"] == "application/json"
        else:
            assert XSS not in response.text and "<script>alert" not in response.text, url
            assert response.headers["content-type"].startswith("text/html")
            assert "script-src 'self'" in response.headers["content-security-policy"]
            assert "'unsafe-inline'" not in response.headers["content-security-policy"]
            assert re.search(r"<script>[^<]", response.text) is None, url  # no inline script anywhere
    node_page = client.get(f"/node/{built.train.name}@{built.train.nonce}:10").text
    assert ESCAPED in node_page and "&lt;script&gt;" in client.get(f"/node/{built.branch}").text


def test_runs_page_lists_lineages_with_branch_resume_and_failure(client, built):
    page = client.get("/").text
    assert page.count('class="run"') == 3 and '<span class="status stale">stale</span>' in page
    assert "branch of" in page and f"{built.train.name}@{built.train.nonce}:10" in page
    assert "resumed" in page and "failed" in page and "1 branch" in page
    rows = {row["lineage"]: row for row in client.get("/api/runs").json()}
    main_row, branch_row = rows[lineage(built.train)], rows[lineage(built.branch)]
    assert rows[lineage(built.gone)]["status"] == "stale"
    assert "stale" in client.get(f"/node/{built.gone}").text
    assert "stale" in client.get(f"/run/{lineage(built.gone)}").text
    assert (main_row["last_seq"], main_row["nodes"], main_row["checkpoints"], main_row["resumed"]) == (20, 21, 1, True)
    assert main_row["artifacts"] == 8 and main_row["values"]["train/loss"] == pytest.approx(3 / 21)
    assert branch_row["status"] == "failed" and branch_row["parents"] == [f"{built.train.name}@{built.train.nonce}:10"]
    filtered = client.get("/", params={"status": "failed"}).text
    assert filtered.count('class="run"') == 1 and lineage(built.branch) in filtered
    assert client.get("/", params={"q": "no-such-run"}).text.count('class="run"') == 0
    by_loss = client.get("/", params={"sort": "train/loss", "desc": "0"}).text
    assert by_loss.index(f'value="{lineage(built.train)}"') < by_loss.index(f'value="{lineage(built.branch)}"')
    assert client.get("/compare", params={"run": [lineage(built.train), lineage(built.branch)]},
                      follow_redirects=False).headers["location"] == \
        f"/run/{lineage(built.train)}?with={lineage(built.branch).replace('@', '%40')}"


def test_run_page_draws_curves_flipbooks_and_timeline(client, built):
    page = client.get(f"/run/{lineage(built.train)}").text
    paths = re.findall(r'<path class="line s0" d="M([^"]+)"', page)
    assert len(paths) >= 3 and len(paths[0].split(" L")) >= 20  # train/loss: one point per seq 0..20
    assert "resumed: steps from 5" in page
    assert page.count('<li data-src="/png/') == 2  # attention at seq 10 and 20 (its latest version there)
    assert "version=2" in page and "checkpoint" in page and "step 10" in page
    assert f"into <a class=\"addr\" href=\"/run/{lineage(built.branch).replace('@', '%40')}\"" in page
    compared = client.get(f"/run/{lineage(built.train)}", params={"with": lineage(built.branch), "key": "train/loss",
                                                                  "log": "1"}).text
    assert compared.count("<figure class=\"chart\"") == 1 and 'class="line s1"' in compared and "(log)" in compared
    curves = client.get(f"/api/curves/{lineage(built.train)}", params={"key": "train/loss"}).json()
    assert curves["curves"]["train/loss"]["seq"] == list(range(21)) and curves["resumes"] == [5]
    assert curves["curves"]["train/loss"]["value"][5] == 0.9  # the latest write wins


def test_node_page_shows_every_artifact_kind(client, built):
    page = client.get(f"/node/{built.train}").text
    assert '<img class="figure" src="/png/' in page
    assert "&#34;top&#34;: [\n    1," in page or '"top": [\n    1,' in page.replace("&#34;", '"')  # pretty JSON
    assert "120 rows · 4 columns" in page and "list&lt;element: double&gt;" in page and "page 1 of 3" in page
    assert "ValueError: " + ESCAPED in page and 'class="text error"' in page
    assert "binary file" in page and "versions:" in page
    assert "training/lr" in page and "model/depth" in page
    second = client.get(f"/view/{built.train}/probe", params={"page": 2}).text
    assert "page 3 of 3" in second and "rows 101–120" in second


def test_downloads_are_the_exact_bytes_with_safe_headers(client, built):
    base = f"/artifact/{built.train}/attention"
    latest, first = client.get(base), client.get(base, params={"version": 1})
    assert latest.content == built.figure_v2 and first.content == built.figure_v1
    assert latest.headers["content-type"] == "application/pdf"
    assert latest.headers["content-disposition"].startswith('attachment; filename="attention.pdf"')
    assert latest.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in latest.headers["content-security-policy"]
    assert client.get(f"/artifact/{built.train}/probe").content == built.table
    evil = client.get(f"/artifact/{built.train}/{XSS.replace('/', '%2F')}")
    assert evil.content == XSS.encode() and evil.headers["content-type"].startswith("text/plain")
    assert evil.headers["content-disposition"] == \
        "attachment; filename=\"evil_name_.txt\"; filename*=UTF-8''evil%22name%3B.txt"
    assert client.get(f"/artifact/{built.train}/nested%2Fname").content == b"slash in the name"
    head = client.head(base)
    assert head.status_code == 200 and head.content == b""
    png = client.get(f"/png/{built.train}/attention", params={"version": 1})
    assert png.content.startswith(b"\x89PNG") and png.headers["cache-control"].endswith("immutable")


@pytest.mark.parametrize("url", [
    "/node/demo.train@000000:0", "/node/not-an-address", "/node/<script>", "/run/demo.train", "/run/x@zzzzzz",
    "/artifact/{train}/missing", "/artifact/{train}/attention?version=9",
    "/artifact/{train}/attention?version=" + "9" * 20,
    "/png/{train}/summary", "/view/{train}/missing", "/artifact/{train}/../../etc/passwd", "/static/../app.py",
    "/nowhere", "/api/stamp?lineage=bad",
])
def test_unknown_things_are_404_pages_without_tracebacks(client, built, url):
    response = client.get(url.format(train=built.train))
    assert response.status_code == 404 and response.headers["content-type"].startswith("text/html")
    assert "Traceback" not in response.text and "Not found" in response.text


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_only_get_and_head_are_served(client, built, method):
    for url in ("/", f"/artifact/{built.train}/summary", "/nowhere"):
        response = client.request(method, url)
        assert response.status_code == 405 and response.headers["allow"] == "GET, HEAD"


def test_the_store_handle_cannot_write(client, built):
    handle = client.app.state.ui.store
    with pytest.raises(StoreError, match="readonly"):
        handle.store.record(built.train, {"x": 1})
    with pytest.raises(Exception, match="(?i)read.?only"), handle.read() as connection:
        connection.execute(insert(records).values(node_id=1, key="x", kind="i", num=1.0, txt="1", written=0.0))
    with Store(built.url) as store:
        assert "x" not in store.values(built.train)


def test_stamps_change_when_the_run_changes(client, built):
    lin = lineage(built.branch)
    before, whole = (client.get("/api/stamp", params={"lineage": lin}).json()["stamp"],
                     client.get("/api/stamp").json()["stamp"])
    other = client.get("/api/stamp", params={"lineage": lineage(built.train)}).json()["stamp"]
    with Store(built.url) as store:
        store.record(built.branch, {"train/loss": 0.25})
    assert client.get("/api/stamp", params={"lineage": lin}).json()["stamp"] != before
    assert client.get("/api/stamp").json()["stamp"] != whole
    assert client.get("/api/stamp", params={"lineage": lineage(built.train)}).json()["stamp"] == other


def test_the_ui_loads_no_jax_and_no_training_or_analysis():
    code = ("import sys, lenscope.ui.app, lenscope.ui.server\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('jax', 'flax', 'optax', 'orbax') or "
            "m.startswith(('lenscope.training', 'lenscope.analysis', 'lenscope.capture'))]\n"
            "print(bad)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_cli_refuses_a_missing_store_and_a_bad_port(tmp_path, capsys):
    assert main(["ui", "--store", str(tmp_path / "none")]) == 2
    assert "no lenscope store" in capsys.readouterr().err
    assert main(["ui", "--store", str(tmp_path), "--port", "70000"]) == 2
    assert "--port must be 0..65535" in capsys.readouterr().err


def test_long_lineages_are_thinned_in_sql_keeping_extremes(client, built):
    handle = client.app.state.ui.store
    every = load_curves(handle, built.train.lineage, ["train/loss"])
    xs, ys = load_curves(handle, built.train.lineage, ["train/loss"], buckets=5).points["train/loss"]
    assert every.points["train/loss"][0] == list(range(21)) and every.counts["train/loss"] == 21
    assert len(xs) <= 10 and xs == sorted(xs) and min(ys) == min(every.points["train/loss"][1])
    assert max(ys) == max(every.points["train/loss"][1]) == 3.0


def test_chart_scales_and_ticks():
    drawn = chart("loss", [Line("a", [0, 10, 20], [1.0, 0.1, 0.01])], log=True)
    assert [label for _, label in drawn.yticks] == ["0.01", "0.1", "1"] and len(drawn.paths) == 1
    assert chart("x", [Line("a", [1], [-1.0])], log=True).empty == "no positive values for a log scale"
    assert nice_ticks(0, 1, 5) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    single = chart("x", [Line("a", [3], [2.0])])
    assert single.dots and not single.empty
    assert json.loads(json.dumps(single.frame))  # the frame travels to the page as JSON


def test_listening_is_local_by_default_and_a_taken_port_is_a_clear_error():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
    first = listen("127.0.0.1", 0)
    try:
        with pytest.raises(UsageError, match=r"cannot listen on 127\.0\.0\.1:\d+: .*choose another --port"):
            listen("127.0.0.1", first.getsockname()[1])
    finally:
        first.close()
