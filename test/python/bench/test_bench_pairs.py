"""kiln.bench.pairs: two sides of kiln timed in alternating bursts by worker processes."""

import pytest

from kiln.bench import pairs


def test_pair_times_both_sides_and_reports_the_median_ratio():
    (row,) = pairs.pair("small_cnn", ["B=1"], pairs.Side(), pairs.Side(env={"KILN_SEQ": "0"}), rounds=2, calls=2)
    assert row["row"] == "B=1" and row["rounds"] == 2 and 0 <= row["b_won"] <= 2
    assert row["a_ms"] > 0 and row["b_ms"] > 0 and row["ratio"] > 0 and row["calls"] == 2


def test_bursts_last_long_enough_by_default():
    (row,) = pairs.pair("small_cnn", ["B=1"], pairs.Side(), pairs.Side(), rounds=1)
    # A B=1 call takes tens of microseconds: a burst of BURST_S seconds is hundreds of them.
    assert row["calls"] >= 10 and row["calls"] * row["a_ms"] / 1e3 >= 0.25 * pairs.BURST_S


def test_a_side_whose_kiln_does_not_import_is_named_with_its_error(tmp_path):
    (tmp_path / "kiln").mkdir()
    (tmp_path / "kiln" / "__init__.py").write_text("raise ImportError('this kiln is broken')\n")
    with pytest.raises(RuntimeError, match="(?s)did not start.*this kiln is broken"):
        pairs.pair("small_cnn", ["B=1"], pairs.Side(path=str(tmp_path)), pairs.Side(), rounds=1, calls=1)


@pytest.mark.parametrize("argv, message", [
    (["small_cnn", "B=3"], "small_cnn has no row 'B=3' (rows: B=1, B=8)"),
    (["cnn", "B=1"], "unknown workload 'cnn'"),
    (["small_cnn", "B=1", "--a-env", "KILN_SEQ"], "take NAME=VALUE, got 'KILN_SEQ'"),
])
def test_bad_arguments_are_one_line_errors(argv, message, capsys):
    assert pairs.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("pairs: error: ") and message in err and "Traceback" not in err
