"""`turbdb query --out x.csv` names its columns as JHTDB does (turbdb.jhtdb.columns) without
importing the web service: FastAPI took 0.4 s of a one-point query's start."""

import subprocess
import sys

import numpy as np

import turbdb

WRITE_CSV = """
import sys
from turbdb.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    assert not e.code, e.code
print("fastapi imported:", "fastapi" in sys.modules)
"""


def test_a_query_to_csv_names_its_columns_without_importing_fastapi(tmp_path):
    ds = turbdb.create_dataset(tmp_path / "db", "flow", grid=(8, 8, 8), times=[0.0, 1.0], atom=4, partition=8)
    for t in range(2):
        ds.write("velocity", t, np.ones((8, 8, 8, 3), dtype=np.float32) * t)
    np.savetxt(tmp_path / "pts.csv", [[0.1, 0.2, 0.3], [1.0, 2.0, 3.0]], delimiter=",")
    out = tmp_path / "grad.csv"
    ran = subprocess.run([sys.executable, "-c", WRITE_CSV, "query", str(tmp_path / "db"), "flow", "--field", "velocity",
                          "--time", "1", "--operator", "gradient", "--points", str(tmp_path / "pts.csv"), "--out",
                          str(out)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert "fastapi imported: False" in ran.stdout, ran.stdout
    assert out.read_text().splitlines()[0] == ",".join(f"du{c}d{a}" for c in "xyz" for a in "xyz")
