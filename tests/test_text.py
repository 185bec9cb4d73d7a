"""One reader for typed values: config overrides, `--analysis NAME,k=v` and `ls --where` agree (YAML 1.2 core)."""

from __future__ import annotations

import math
import re
import tracemalloc
from dataclasses import dataclass
from typing import Any

import pytest
from yaml_inputs import alias_bomb

from lenscope import AnalysisCfg, Store, UsageError
from lenscope.cli import main
from lenscope.config import field, hydrate, parse_override
from lenscope.text import RefusedYAML, load_yaml, load_yaml_file, parse_value, yaml_problem

INF = math.inf
# (typed text, the Python value every entry point reads it as)
CASES = [
    ("true", True), ("False", False), ("TRUE", True),
    ("yes", "yes"), ("no", "no"), ("on", "on"), ("off", "off"), ("y", "y"),  # YAML 1.1 booleans stay text
    ("null", None), ("~", None), ("Null", None),
    ("3", 3), ("-7", -7), ("+4", 4), ("012", 12), ("0x1f", 31), ("0o17", 15),
    ("1e-3", 0.001), ("1E5", 100000.0), (".5", 0.5), ("2.5", 2.5), ("1.", 1.0), ("-1.5e+3", -1500.0),
    (".inf", INF), ("-.inf", -INF), ("inf", "inf"), ("nan", "nan"),
    ("[1, a, 1e-3]", [1, "a", 0.001]), ("[]", []), ("{k: v, n: 2}", {"k": "v", "n": 2}),
    ("'1e-3'", "1e-3"), ('"42"', "42"), ("'yes'", "yes"),
    ("hello", "hello"), ("a b", "a b"), ("2024-01-01", "2024-01-01"), ("1:30", "1:30"), ("1_000", "1_000"),
    ("blocks_*", "blocks_*"), ("**/attn", "**/attn"), ("[1, 2", "[1, 2"), ("a: b: c", "a: b: c"), ("=", "="),
]
IDS = [text or "empty" for text, _ in CASES]


def same(got: Any, expected: Any) -> bool:
    """Equal with equal types all the way down (1, 1.0 and True are three different answers)."""
    if type(got) is not type(expected):
        return False
    if isinstance(expected, list):
        return len(got) == len(expected) and all(same(g, e) for g, e in zip(got, expected))
    if isinstance(expected, dict):
        return list(got) == list(expected) and all(same(got[k], expected[k]) for k in expected)
    return got == expected


@dataclass
class Free:
    extra: dict[str, Any] = field("run/extra", default_factory=dict, help="free-form values")


@pytest.mark.parametrize(("text", "expected"), CASES, ids=IDS)
def test_config_overrides_and_analysis_values_read_text_alike(text, expected):
    assert same(parse_value(text), expected)
    path, value = parse_override(f"run/extra/v={text}")
    assert path == "run/extra/v" and same(value, expected)
    assert same(hydrate(Free, f"run/extra/v={text}").extra["v"], expected)
    (cfg,) = AnalysisCfg.parse(f"activation_stats,v={text}")
    assert same(cfg.params["v"], expected)


def test_nan_and_the_empty_value():
    assert math.isnan(parse_value(".nan")) and math.isnan(parse_value(".NaN"))
    assert math.isnan(hydrate(Free, "run/extra/v=.nan").extra["v"])
    assert parse_value("") is None and parse_override("run/extra/v=")[1] is None
    assert load_yaml("a:\nb: [1, yes, 010]\n") == {"a": None, "b": [1, "yes", 10]}


@pytest.fixture(scope="module")
def valued(tmp_path_factory):
    """A store with one node per case value and one per case text (as a string), all under value key `v`."""
    root = tmp_path_factory.mktemp("text") / "runs"
    scalars = [e for _, e in CASES if not isinstance(e, (list, dict))] + [t for t, _ in CASES]
    with Store(root) as store:
        nodes = store.new_nodes([f"n{i}" for i in range(len(scalars))])
        store.record_many([(node, {"v": value}) for node, value in zip(nodes, scalars)])
    return root


def _api(root, op: str, value: Any) -> set[str] | str:
    """The nodes the Python query selects, or 'refused' when it refuses the value."""
    with Store(root, readonly=True) as store:
        try:
            return {str(n) for n in store.query().where("v", op, value).all()}
        except UsageError:
            return "refused"


def _cli(root, capsys, op: str, text: str) -> set[str] | str:
    """The nodes `lenscope ls --where v OP TEXT -q` prints, or 'refused' when it exits 2."""
    code = main(["ls", "--store", str(root), "-q", "--where", "v", op, text])
    out = capsys.readouterr().out
    return "refused" if code == 2 else set(out.split())


@pytest.mark.parametrize(("text", "expected"), CASES, ids=IDS)
def test_ls_where_reads_text_as_the_config_does(valued, capsys, text, expected):
    op = "in" if isinstance(expected, list) else "=="
    got = _cli(valued, capsys, op, text)
    assert got == _api(valued, op, expected)
    if not same(expected, text):
        assert got != _api(valued, op, text)  # the value read from the text was compared, not the text


# ---- refused YAML: duplicate keys and aliases -------------------------------------

@pytest.mark.parametrize("text, problem", [
    ("a: 1\nb: 2\na: 3\n", "duplicate key 'a' at line 3, column 1 (first at line 1; a key may appear once"),
    ("x:\n  y: 1\n  y: 1\n", "duplicate key 'y' at line 3, column 3 (first at line 2"),
    ("- {k: 1, k: 2}\n", "duplicate key 'k' at line 1"),
    ("a: &base {k: 1}\nb: *base\n", "YAML alias *base refused at line 2, column 4 (aliases and << merges are not"),
    ("a: &base {k: 1}\nb:\n  <<: *base\n", "YAML alias *base refused"),
])
def test_duplicate_keys_and_aliases_are_refused_with_their_place(text, problem):
    with pytest.raises(RefusedYAML) as caught:
        load_yaml(text)
    assert yaml_problem(caught.value).startswith(problem)


def test_typed_values_with_aliases_or_duplicate_keys_are_errors_not_text():
    for text, problem in [("[&a [1, 2], *a]", "YAML alias *a refused"), ("{k: 1, k: 2}", "duplicate key 'k'")]:
        with pytest.raises(UsageError, match=re.escape(problem)):
            parse_value(text)
    assert parse_value("*undefined") == "*undefined" and parse_value("&a 3") == 3  # not YAML aliases: as before


def test_an_alias_bomb_fails_at_once_without_expanding(tmp_path):
    bomb = alias_bomb()
    assert len(bomb.encode()) <= 400  # the 392-byte file: 9**9 = 387 million leaves once expanded
    (tmp_path / "bomb.yaml").write_text(bomb)
    tracemalloc.start()
    try:
        with pytest.raises(UsageError, match=r"bomb.yaml': YAML alias \*a refused at line 2"):
            load_yaml_file(tmp_path / "bomb.yaml", "config file")
        with pytest.raises(UsageError, match=r"YAML alias \*a refused"):
            parse_value(alias_bomb(flow=True))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * 2**20  # bytes allocated while reading it: far below one expanded level (9**4 strings)
