"""Node identity and addresses (S1): exact round trips, clear refusals, job-name cleaning."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lenscope.errors import UsageError
from lenscope.store import Node
from lenscope.store.node import is_address

segment = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_\-]{0,11}", fullmatch=True)
names = st.lists(segment, min_size=1, max_size=4).map(".".join)
nonces = st.from_regex(r"[0-9a-f]{6}", fullmatch=True)
seqs = st.integers(min_value=0, max_value=2**31 - 1)  # the seq column is 32-bit on PostgreSQL


def test_address_form_and_str():
    node = Node("grokking.train", "7f3a2c", 12)
    assert node.address == "grokking.train@7f3a2c:12"
    assert str(node) == node.address
    assert f"{node}" == "grokking.train@7f3a2c:12"
    assert node.lineage == ("grokking.train", "7f3a2c")


@given(names, nonces, seqs)
def test_address_round_trips_exactly(name, nonce, seq):
    node = Node(name, nonce, seq)
    parsed = Node.parse(node.address)
    assert parsed == node
    assert parsed.address == node.address
    assert is_address(node.address)


@given(st.text(max_size=40))
def test_parse_accepts_only_what_it_prints(text):
    try:
        node = Node.parse(text)
    except UsageError as error:
        assert "NAME@NONCE:SEQ" in str(error)
    else:
        assert node.address == text


@pytest.mark.parametrize(
    "text",
    [
        "grokking.train",  # no nonce
        "grokking.train@7f3a2c",  # no seq
        "grokking.train@7F3A2C:1",  # upper-case nonce
        "grokking.train@7f3a2:1",  # 5 digits
        "grokking.train@7f3a2c:01",  # leading zero would not round-trip
        "grokking.train@7f3a2c:-1",
        "grokking/train@7f3a2c:1",  # job name, not node name
        "@7f3a2c:1",
        "a..b@7f3a2c:1",
        " grokking.train@7f3a2c:1",
    ],
)
def test_parse_refuses_bad_addresses_with_the_expected_form(text):
    with pytest.raises(UsageError, match=re.escape("NAME@NONCE:SEQ")) as caught:
        Node.parse(text)
    assert repr(text) in str(caught.value)


def test_parse_refuses_non_strings():
    with pytest.raises(UsageError, match="expected a node address"):
        Node.parse(12)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("", "7f3a2c", 0), "bad node name"),
        (("a/b", "7f3a2c", 0), "bad node name"),
        (("x" * 201, "7f3a2c", 0), "bad node name"),
        (("a", "7f3a2", 0), "bad node nonce"),
        (("a", "7f3a2c", -1), "bad node seq"),
        (("a", "7f3a2c", True), "bad node seq"),
        (("a", "7f3a2c", 1.0), "bad node seq"),
    ],
)
def test_constructor_validates(args, match):
    with pytest.raises(UsageError, match=match):
        Node(*args)


def test_successor_and_first():
    node = Node.parse("grokking.train@7f3a2c:12")
    assert node.successor() == Node("grokking.train", "7f3a2c", 13)
    first = Node.first("a.b")
    assert first.seq == 0 and re.fullmatch(r"[0-9a-f]{6}", first.nonce)
    assert Node.first("a.b", "000000").nonce == "000000"


def test_nodes_sort_by_name_nonce_seq_and_hash():
    a, b, c = Node("a", "000001", 2), Node("a", "000001", 10), Node("b", "000000", 0)
    assert sorted([c, b, a]) == [a, b, c]
    assert len({a, Node.parse(a.address)}) == 1
    assert repr(a) == "Node('a@000001:2')"


@pytest.mark.parametrize(
    ("job", "name"),
    [
        ("grokking/train", "grokking.train"),
        ("grokking.train", "grokking.train"),
        ("pkg.jobs:MyTrainer", "pkg.jobs.MyTrainer"),
        ("a b/c-d", "a_b.c-d"),
        ("/x//y/", "x.y"),
        ("-x/y", "x.y"),
    ],
)
def test_clean_name(job, name):
    assert Node.clean_name(job) == name
    Node(name, "000000", 0)  # always a valid node name


@given(names)
def test_clean_name_keeps_valid_names(name):
    assert Node.clean_name(name) == name


@pytest.mark.parametrize("job", ["", "///", "..", 3])
def test_clean_name_refuses_empty_results(job):
    with pytest.raises(UsageError):
        Node.clean_name(job)
