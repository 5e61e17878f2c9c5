"""The kernel benchmark's thread-scaling figures (bench/kernel_scaling.py): the ratio paired
round by round and the medians it is reported beside."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import kernel_scaling  # noqa: E402


def run(path: str, threads: int, round_: int, pps: float, method: str = "lag8", operator: str = "field") -> dict:
    return {"path": path, "threads": threads, "round": round_, "points_per_s": pps, "seconds": 1e6 / pps,
            "method": method, "operator": operator}


def test_the_ratio_is_paired_within_each_round_not_across_them():
    # Round 1 is a slow spell for both thread counts, round 2 a fast one: each round's own
    # ratio is 10x, while the rounds' extremes would give 1x to 100x.
    rows = [run("avx2", 1, 0, 1.0), run("avx2", 16, 0, 10.0),
            run("avx2", 1, 1, 10.0), run("avx2", 16, 1, 100.0),
            run("avx2", 1, 2, 4.0), run("avx2", 16, 2, 44.0)]
    paired = kernel_scaling.paired_scaling(rows, [1, 16])
    assert paired["avx2"]["ratios"] == pytest.approx([10.0, 10.0, 11.0])
    assert paired["avx2"]["median"] == pytest.approx(10.0)
    assert (paired["avx2"]["min"], paired["avx2"]["max"]) == pytest.approx((10.0, 11.0))
    assert paired["avx2"]["threads"] == [1, 16]


def test_paths_are_paired_apart_and_only_the_lag8_field_counts():
    rows = [run("avx2", 1, 0, 2.0), run("avx2", 8, 0, 12.0), run("avx2", 16, 0, 20.0),
            run("avx512", 1, 0, 3.0), run("avx512", 16, 0, 33.0),
            run("avx2", 1, 0, 1.0, operator="gradient"), run("avx2", 16, 0, 50.0, operator="gradient")]
    paired = kernel_scaling.paired_scaling(rows, [1, 8, 16])
    assert paired["avx2"]["ratios"] == pytest.approx([10.0])
    assert paired["avx512"]["ratios"] == pytest.approx([11.0])


def test_a_round_missing_a_thread_count_is_left_out():
    rows = [run("avx2", 1, 0, 2.0), run("avx2", 16, 0, 20.0), run("avx2", 1, 1, 2.0)]
    assert kernel_scaling.paired_scaling(rows, [1, 16])["avx2"]["ratios"] == pytest.approx([10.0])
    assert kernel_scaling.paired_scaling(rows[2:], [1, 16]) == {}


def test_medians_keep_every_runs_rate_and_take_the_slower_middle_of_an_even_count():
    rows = [run("avx2", 1, k, pps) for k, pps in enumerate([4.0, 1.0, 3.0, 2.0])]
    (median,) = kernel_scaling.medians(rows)
    assert median["points_per_s"] == 2.0
    assert sorted(median["runs_points_per_s"]) == [1.0, 2.0, 3.0, 4.0]
    assert "round" not in median


def test_a_run_without_the_field_prints_no_scaling_and_plots_its_first_operator(tmp_path, capsys):
    # --operators hessian: no lag8 field rows for the scaling figures.
    rows = [{**run("avx2", t, 0, pps, operator="hessian"), "ns_per_point": dict.fromkeys(kernel_scaling.PHASES, 1.0)}
            for t, pps in ((1, 2.0), (2, 4.0))]
    kernel_scaling.print_scaling(rows, [1, 2], kernel_scaling.paired_scaling(rows, [1, 2]))
    assert capsys.readouterr().out == ""
    pytest.importorskip("matplotlib")
    kernel_scaling.plot(rows, [1, 2], tmp_path / "k.png", {"cpu": "test"}, (0.0,), {})
    assert "lag8 hessian, where the time goes" in (tmp_path / "k.svg").read_text()


def test_the_ceiling_of_independent_copies_is_paired_within_each_round():
    import independent_copies

    # Round 1 is a slow spell for all three runs; each round's own ratios are what count.
    rounds = [{"alone": 1.0, "copies": 12.0, "copies_each": [0.5, 1.0] * 8, "threads": 9.0},
              {"alone": 4.0, "copies": 52.0, "copies_each": [3.0, 3.5] * 8, "threads": 44.0},
              {"alone": 2.0, "copies": 22.0, "copies_each": [1.0, 2.0] * 8, "threads": 22.0}]
    s = independent_copies.summarize(rounds, 16)
    assert s["ceiling"]["per_round"] == pytest.approx([12.0, 13.0, 11.0])
    assert s["ceiling"]["median"] == pytest.approx(12.0)
    assert s["scaling"]["per_round"] == pytest.approx([9.0, 11.0, 11.0])
    assert s["share_of_ceiling"]["per_round"] == pytest.approx([0.75, 44 / 52, 1.0])
    assert (s["share_of_ceiling"]["min"], s["share_of_ceiling"]["max"]) == pytest.approx((0.75, 1.0))
    # Each copy's median against the process alone: 1/0.75, 4/3.25, 2/1.5; their median.
    assert s["slowdown_each_copy"] == pytest.approx(4 / 3)
