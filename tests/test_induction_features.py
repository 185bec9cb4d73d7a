"""`repeated_positions`: the tokens that continue a sequence seen earlier in their row."""

import numpy as np
import pytest

from lenscope.examples.induction_features import repeated_positions


def test_a_repeated_span_is_marked_from_its_nth_token_on():
    row = [5, 6, 7, 8, 5, 6, 7, 9, 6]
    got = repeated_positions(np.asarray([row, row[::-1]]), n=2)
    np.testing.assert_array_equal(got[0], [0, 0, 0, 0, 0, 1, 1, 0, 0])  # (5, 6) and (6, 7) seen before; (9, 6) not
    np.testing.assert_array_equal(got[1], [0, 0, 0, 0, 0, 0, 0, 1, 1])  # reversed: (7, 6) and (6, 5) come again
    np.testing.assert_array_equal(repeated_positions(np.asarray([row]), n=1)[0], [0, 0, 0, 0, 1, 1, 1, 0, 1])
    np.testing.assert_array_equal(repeated_positions(np.asarray([row]), n=3)[0], [0, 0, 0, 0, 0, 0, 1, 0, 0])


def test_random_repeats_are_found_and_chance_repeats_are_rare():
    rng = np.random.default_rng(0)
    span = rng.integers(1, 512, 40)
    rows = np.stack([np.concatenate([rng.integers(1, 512, 20), span, span, rng.integers(1, 512, 28)])
                     for _ in range(8)])
    got = repeated_positions(rows, n=2)
    assert got[:, 61:100].all()  # copy 2 from its second token on
    assert got[:, :60].sum() + got[:, 100:].sum() <= 2  # elsewhere only by chance


def test_rows_shorter_than_n_and_a_bad_n():
    assert not repeated_positions(np.ones((2, 2), int), n=3).any()
    with pytest.raises(ValueError, match="n=0"):
        repeated_positions(np.ones((1, 4), int), n=0)
