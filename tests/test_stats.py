"""Velocity-gradient statistics from point queries: the R–Q teardrop of turbulence (present in
a DNS, absent from a Gaussian random-phase field), the energy spectrum from a cutout, the
files written, and the `turbdb stats`, `turbdb track` and `turbdb demo` commands."""

import json
import subprocess
import sys

import numpy as np
import pytest

import turbdb
from turbdb import diagnostics, plots, stats


def run(*args):
    result = subprocess.run([sys.executable, "-m", "turbdb.cli", *map(str, args)], capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result


def test_dns_shows_the_teardrop_and_a_random_phase_field_does_not(dns32, synthetic32):
    turbulent = stats.rq_pdf(dns32, time=1.0, points=20_000, seed=1)
    gaussian = stats.rq_pdf(synthetic32, time=0.0, points=20_000, seed=1)
    f = turbulent.fractions
    assert f["Q<0,R>0"] > 1.5 * f["Q<0,R<0"], f  # strain-dominated regions sit on the right branch
    assert f["Q>0,R<0"] > 1.5 * f["Q>0,R>0"], f  # vortex stretching beats compression
    assert turbulent.asymmetry > diagnostics.MIN_RQ_ASYMMETRY > gaussian.asymmetry
    assert abs(gaussian.asymmetry - 1) < 0.1, gaussian.fractions


def test_point_queried_invariants_agree_with_spectral_ones_at_the_nodes(dns32):
    info = dns32.info
    t_index = 5
    nodes = np.random.default_rng(2).integers(0, 32, (500, 3))
    result = stats.rq_pdf(dns32, time=float(info.times[t_index]), points=nodes * info.spacing[0], method="lag8")
    u = dns32.cutout("velocity", time=float(info.times[t_index])).values.astype(np.float64)
    a = diagnostics.velocity_gradient(u)[nodes[:, 2], nodes[:, 1], nodes[:, 0]]
    r, q = diagnostics.rq_invariants(a)
    # lag8 differentiates the band-limited field to a few per cent of the spectral value.
    assert np.corrcoef(result.q, q)[0, 1] > 0.99 and np.corrcoef(result.r, r)[0, 1] > 0.98
    assert result.time == float(info.times[t_index])


def test_pdf_is_normalised_by_qw_and_integrates_to_the_mass_inside_the_window(dns32):
    result = stats.rq_pdf(dns32, time=0.5, points=10_000, seed=3)
    area = np.diff(result.r_edges)[:, None] * np.diff(result.q_edges)[None, :]
    inside = ((result.r / result.qw_mean**1.5 >= stats.R_RANGE[0]) & (result.r / result.qw_mean**1.5 <= stats.R_RANGE[1])
              & (result.q / result.qw_mean >= stats.Q_RANGE[0]) & (result.q / result.qw_mean <= stats.Q_RANGE[1]))
    assert np.sum(result.pdf * area) == pytest.approx(inside.mean())
    assert inside.mean() > 0.99
    # <Q> = 0 in homogeneous flow: the strain and rotation parts balance on average.
    assert abs(np.mean(result.q)) < 0.1 * result.qw_mean


def test_results_are_saved_as_png_npz_and_json(dns32, tmp_path):
    paths = stats.rq_pdf(dns32, time=1.0, points=5_000).save(tmp_path / "out" / "rq_t1.0")
    assert [p.name for p in paths] == ["rq_t1.0.png", "rq_t1.0.npz", "rq_t1.0.json"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = np.load(paths[1])
    assert data["pdf"].shape == (80, 80) and data["r"].shape == (5_000,)
    summary = json.loads(paths[2].read_text())
    assert summary["teardrop"] is True and summary["points"] == 5_000


def test_energy_spectrum_of_a_stored_step_sums_to_the_kinetic_energy(dns32, tmp_path):
    spectrum = stats.energy_spectrum(dns32, time=0.3)
    u = dns32.cutout("velocity", time=0.3).values.astype(np.float64)
    energy = 0.5 * np.mean(np.sum((u - u.mean(axis=(0, 1, 2))) ** 2, axis=-1))
    assert np.sum(spectrum.e) * spectrum.k[0] == pytest.approx(energy, rel=1e-9)
    assert spectrum.time == pytest.approx(0.32)  # the nearest stored step
    png, npz, summary = spectrum.save(tmp_path / "spectrum")
    assert png.stat().st_size > 1000 and np.load(npz)["E"].shape == spectrum.e.shape


def test_spectrum_of_a_dns_shows_resolved_shells_in_kolmogorov_units(dns32, tmp_path, monkeypatch):
    spectrum = stats.energy_spectrum(dns32, time=0.48)
    nu = dns32.info.provenance["dns_nu"]
    assert spectrum.nu == nu and spectrum.k_cutoff == pytest.approx(32 / 3) and spectrum.k_forcing == 2.5
    k, e = spectrum.resolved()
    assert k.max() == 11 and len(spectrum.k) == 28  # shell 11 holds |k| < 32/3 in part; 12 … 28 lie beyond
    assert spectrum.e[spectrum.k > 11].max() < 1e-12 * spectrum.e.max()  # float32 round-off only
    u = dns32.cutout("velocity", time=0.48).values.astype(np.float64)
    assert spectrum.dissipation == pytest.approx(diagnostics.dissipation(u, nu), rel=1e-12)
    assert spectrum.re_lambda == pytest.approx(diagnostics.taylor_reynolds(u, nu), rel=1e-9)
    assert 15 < spectrum.re_lambda < 35 and spectrum.plateau is None  # no inertial range at this Re
    assert spectrum.compensated() == pytest.approx(k ** (5 / 3) * e / spectrum.dissipation ** (2 / 3))
    png, _, summary = spectrum.save(tmp_path / "spectrum")
    assert json.loads(summary.read_text())["kmax_eta"] == pytest.approx(32 / 3 * spectrum.eta)
    assert "no inertial range" in plots.spectrum_statement(spectrum)
    legend = _legend_of(plots.plot_spectrum, spectrum, tmp_path, monkeypatch)
    assert "dealiasing cutoff k_max = (n/3)·2π/L = 10.7" in legend  # the number, in the plot's own units


def _legend_of(plot, result, tmp_path, monkeypatch):
    """The legend texts of the figure ``plot`` draws (caught before it is saved and closed)."""
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    plot(result, tmp_path / "figure.png")
    return " ".join(t.get_text() for ax in figures[0].axes if ax.get_legend() for t in ax.get_legend().get_texts())


def test_spectrum_without_a_viscosity_says_the_kolmogorov_scales_are_unknown(synthetic32, tmp_path, monkeypatch):
    spectrum = stats.energy_spectrum(synthetic32, time=0.0)
    assert spectrum.nu is None and spectrum.dissipation is None and spectrum.plateau is None
    assert spectrum.k_cutoff == 16 and spectrum.resolved()[0].max() < 16  # the Nyquist shell, or the round-off floor
    assert "unknown" in plots.spectrum_statement(spectrum)
    assert spectrum.save(tmp_path / "s")[0].stat().st_size > 1000
    assert "Nyquist k = (n/2)·2π/L = 16" in _legend_of(plots.plot_spectrum, spectrum, tmp_path, monkeypatch)


def test_the_rq_pdf_is_labelled_with_the_stored_step_whose_gradients_it_holds(tmp_path):
    # Steps 0 and 0.5 of an ABC flow scaled 1 and 2 (<Q_w> = 3/4 and 3): at t = 0.25, a tie,
    # the engine reads the later step; the label said t = 0 (and 0.05 of 0, 0.1, … said 0).
    n = 16
    x = 2 * np.pi / n * np.arange(n)
    z, y, x = np.meshgrid(x, x, x, indexing="ij")
    abc = np.stack([np.sin(z) + np.cos(y), np.sin(x) + np.cos(z), np.sin(y) + np.cos(x)], -1)
    ds = turbdb.create_dataset(tmp_path, "abc", grid=(n, n, n), times=[0.0, 0.5], fields={"velocity": 3})
    ds.write("velocity", 0, abc)
    ds.write("velocity", 1, 2 * abc)
    for t, stored, qw in ((0.0, 0.0, 0.75), (0.25, 0.5, 3.0), (0.3, 0.5, 3.0), (0.2, 0.0, 0.75)):
        rq = stats.rq_pdf(ds, time=t, points=4000)
        assert rq.time == stored and rq.qw_mean == pytest.approx(qw, rel=0.05), (t, rq.time, rq.qw_mean)
    tenths = np.round(np.arange(8) * 0.1, 10)
    assert [tenths[turbdb.times.nearest_stored_index(tenths, t)] for t in (0.05, 0.25, 0.45)] == [0.1, 0.3, 0.5]


def test_bad_statistics_requests_are_refused(dns32, tmp_path):
    with pytest.raises(turbdb.InvalidRequestError, match="at least 2 points"):
        stats.rq_pdf(dns32, time=0.0, points=1)
    with pytest.raises(turbdb.InvalidRequestError, match="3-component field; 'pressure' has 1"):
        stats.rq_pdf(dns32, time=0.0, points=10, field="pressure")
    with pytest.raises(turbdb.InvalidRequestError, match="outside the stored range"):
        stats.rq_pdf(dns32, time=99.0, points=10)
    walls = turbdb.create_dataset(tmp_path, "walls", grid=(8, 8, 8), periodic=(True, False, True), times=[0.0],
                                  fields={"velocity": 3})
    walls.write("velocity", 0, np.zeros((8, 8, 8, 3)))
    with pytest.raises(turbdb.InvalidRequestError, match="periodic box"):
        stats.energy_spectrum(walls, time=0.0)
    with pytest.raises(turbdb.InvalidRequestError, match="no vorticity"):
        stats.rq_pdf(walls, time=0.0, points=10)
    # A uniform flow's gradients are rounding noise (about 1e-15): no PDF is made of them.
    uniform = turbdb.create_dataset(tmp_path, "uniform", grid=(8, 8, 8), times=[0.0], fields={"velocity": 3})
    uniform.write("velocity", 0, np.broadcast_to(np.float32([1, 2, 3]), (8, 8, 8, 3)).copy())
    with pytest.raises(turbdb.InvalidRequestError, match="below the rounding noise"):
        stats.rq_pdf(uniform, time=0.0, points=1000)
    with pytest.raises(turbdb.LimitExceededError, match="random points would take"):
        stats.rq_pdf(dns32, time=0.0, points=10**11)
    with pytest.raises(turbdb.InvalidRequestError, match="seed must be a whole number from 0"):
        stats.rq_pdf(dns32, time=0.0, points=10, seed=-1)


def test_cli_stats_track_and_demo_write_their_files(dns32, tmp_path):
    db = dns32.path.parent
    out = run("stats", "rq", db, "dns32", "--time", "1", "--points", "5000", "--out", tmp_path / "s").stdout
    assert "ratio" in out and (tmp_path / "s" / "rq_t0.96_lag6.png").is_file()
    run("stats", "spectrum", db, "dns32", "--time", "1", "--out", tmp_path / "s")
    assert (tmp_path / "s" / "spectrum_t0.96.npz").is_file()

    out = run("track", db, "dns32", "--points", "300", "--start", "0.2", "--end", "0.6", "--dt", "0.05",
              "--out", tmp_path / "t.npy", "--velocity", "--quiet").stdout
    assert "tracked 300 particles" in out and "in 8 steps" in out
    assert np.load(tmp_path / "t.npy").shape == np.load(tmp_path / "t.velocity.npy").shape == (9, 300, 3)
    np.savetxt(tmp_path / "p.csv", np.load(tmp_path / "t.npy")[-1], delimiter=",")
    result = run("track", db, "dns32", "--points", tmp_path / "p.csv", "--start", "0.6", "--end", "0.2", "--dt", "0.05",
                 "--out", tmp_path / "back.npy")
    assert "8/8" not in result.stderr  # no progress bar where stderr is no terminal (a log file)
    np.testing.assert_allclose(np.load(tmp_path / "back.npy")[-1], np.load(tmp_path / "t.npy")[0], atol=1e-3)
    failed = subprocess.run([sys.executable, "-m", "turbdb.cli", "track", db, "dns32", "--points", "3", "--start", "0",
                             "--end", "9", "--dt", "0.1", "--out", tmp_path / "x.npy"], capture_output=True, text=True)
    assert failed.returncode == 1 and "end = 9 is outside the stored times" in failed.stderr

    out = run("demo", db, "--name", "dns32", "--out", tmp_path / "demo").stdout
    assert "tracking 4096 particles" in out and "teardrop" in out
    for name in ("vorticity_slice", "energy_spectrum", "trajectories", "rq_pdf"):
        assert (tmp_path / "demo" / f"{name}.png").is_file()
    # A uniform flow of one step: what cannot be shown is said and skipped, with no warning or traceback.
    uniform = turbdb.create_dataset(tmp_path / "udb", "uniform", grid=(16, 16, 16), times=[0.0], fields={"velocity": 3})
    uniform.write("velocity", 0, np.broadcast_to(np.float32([1, 2, 3]), (16, 16, 16, 3)).copy())
    result = run("demo", tmp_path / "udb", "--name", "uniform")
    assert "skewness and flatness are undefined" in result.stdout and "tracking: skipped" in result.stdout
    assert "R–Q joint PDF: skipped" in result.stdout and "Warning" not in result.stderr
