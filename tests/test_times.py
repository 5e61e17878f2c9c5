"""Stored times are the decimal values people write (10.8, not 10.799999999999999), and
print that way everywhere they are shown."""

import numpy as np
import pytest

import turbdb
from turbdb.times import format_time, time_grid


def test_time_grid_is_the_decimal_grid_not_the_float_product() -> None:
    times = time_grid(0.0, 0.12, 100)
    assert 90 * 0.12 == 10.799999999999999  # what np.arange(100) * 0.12 stores
    assert times[90] == 10.8 and repr(float(times[90])) == "10.8"
    assert times.tolist() == [float(f"{0.12 * i:.10f}") for i in range(100)]
    assert time_grid(-0.002, 0.002, 3, first=1).tolist() == [0.0, 0.002, 0.004]
    third = time_grid(0.0, 1 / 3, 4)  # a dt with no short decimal keeps its float value
    assert third == pytest.approx(np.arange(4) / 3, rel=1e-15, abs=0)


@pytest.mark.parametrize(("t", "text"), [(10.8, "10.8"), (10.799999999999999, "10.8"), (0.0, "0"),
                                         (0.12, "0.12"), (1.5e-05, "1.5e-05"), (2.0, "2"), (1 / 3, "0.333333333333333")])
def test_format_time_prints_times_as_written(t: float, text: str) -> None:
    assert format_time(t) == text


def test_simulated_dataset_stores_and_describes_decimal_times(tmp_path) -> None:
    from turbdb.simulation_run import run_simulation

    ds = run_simulation(tmp_path, "syn", grid=16, steps=4, kind="synthetic", quiet=True)
    assert ds.info.times.tolist() == [0.0, 0.01, 0.02, 0.03]
    assert "t = 0 … 0.03 (dt 0.01)" in ds.info.describe()
    assert turbdb.open(tmp_path)["syn"].cutout("velocity", time=0.03).attrs["time"] == 0.03
