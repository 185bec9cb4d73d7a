"""`repeat_roles`: the tokens that repeat a sequence seen earlier in their row, and the first occurrences of those."""

import numpy as np
import pytest

from lenscope.examples.induction_features import FIRST, NEITHER, REPEAT, repeat_roles

N, F, R = NEITHER, FIRST, REPEAT


def test_a_repeated_span_is_marked_from_its_nth_token_on():
    row = [5, 6, 7, 8, 5, 6, 7, 9, 6]
    got = repeat_roles(np.asarray([row, row[::-1]]), n=2)
    np.testing.assert_array_equal(got[0], [N, F, F, N, N, R, R, N, N])  # (5, 6) and (6, 7) come again
    np.testing.assert_array_equal(got[1], [N, N, N, F, F, N, N, R, R])  # reversed: (7, 6) and (6, 5) do
    np.testing.assert_array_equal(repeat_roles(np.asarray([row]), n=1)[0], [F, F, F, N, R, R, R, N, R])
    np.testing.assert_array_equal(repeat_roles(np.asarray([row]), n=3)[0], [N, N, F, N, N, N, R, N, N])


def test_random_repeats_are_found_and_chance_repeats_are_rare():
    rng = np.random.default_rng(0)
    span = rng.integers(1, 512, 40)
    rows = np.stack([np.concatenate([rng.integers(1, 512, 20), span, span, rng.integers(1, 512, 28)])
                     for _ in range(8)])
    got = repeat_roles(rows, n=2)
    assert (got[:, 61:100] == REPEAT).all() and (got[:, 21:60] == FIRST).all()  # each copy from its second token
    assert (got[:, :20] != NEITHER).sum() + (got[:, 100:] != NEITHER).sum() <= 4  # elsewhere only by chance


def test_rows_shorter_than_n_and_a_bad_n():
    assert (repeat_roles(np.ones((2, 2), int), n=3) == NEITHER).all()
    with pytest.raises(ValueError, match="n=0"):
        repeat_roles(np.ones((1, 4), int), n=0)
