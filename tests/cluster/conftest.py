"""What the cluster tests share: the small analytic dataset they place on their workers."""

import math
from pathlib import Path

import numpy as np
import pytest

import turbdb

TWO_PI = 2 * math.pi


def write_trig(db: Path) -> Path:
    """A 16³ periodic ``trig`` dataset of two steps (atoms of 4³, partitions of 8³), the
    velocity a trigonometric field, in the database ``db``; returns ``db``."""
    axis = np.arange(16) * TWO_PI / 16
    z, y, x = np.meshgrid(axis, axis, axis, indexing="ij")
    ds = turbdb.create_dataset(db, "trig", grid=(16, 16, 16), times=[0.0, 1.0], atom=4, partition=8,
                               fields={"velocity": 3})
    for t in range(2):
        ds.write("velocity", t, np.stack([np.sin(x) * (1 + t), np.cos(y), np.cos(x + z)], -1))
    return db


@pytest.fixture(scope="session")
def make_trig():
    return write_trig
