"""The pieces under the service, in process: the tokens file and its limits, the rate
limiter, admission by points in flight, .npy decoding that never unpickles, and the
streamed NetCDF writer."""

import asyncio
import io

import numpy as np
import pytest
import xarray

import turbdb
from turbdb.service.admission import BusyError, PointsLimiter
from turbdb.service.tokens import JHTDB_TESTING_TOKEN, Tokens
from turbdb.service.transport import NetCDFStream, decode_npy, encode_npy, npy_header


def test_a_tokens_file_gives_each_token_its_limits(tmp_path):
    path = tmp_path / "tokens.toml"
    path.write_text('[anonymous]\nmax_points = 10\n\n[[token]]\ntoken = "alice-secret"\nname = "alice"\nmax_points = 500\n'
                    'datasets = ["iso"]\n\n[[token]]\nsha256 = "'
                    'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"\nname = "hashed"\n')
    tokens = Tokens.load(path)
    assert tokens.identify(None).max_points == 10 and tokens.identify(JHTDB_TESTING_TOKEN).name == "anonymous"
    alice = tokens.identify("alice-secret")
    assert alice.name == "alice" and alice.max_points == 500 and alice.allows("iso") and not alice.allows("other")
    assert tokens.identify("abc").name == "hashed"  # the file holds sha256("abc") only
    with pytest.raises(turbdb.AccessDeniedError, match="not recognised") as denied:
        tokens.identify("abd")
    assert denied.value.status == 401
    with pytest.raises(turbdb.AccessDeniedError, match="may not read dataset 'other'") as denied:
        alice.check_dataset("other")
    assert denied.value.status == 403
    with pytest.raises(turbdb.LimitExceededError, match="batches of at most 500"):
        alice.check_points(501)


def test_without_a_file_anonymous_use_has_jhtdb_limits():
    anonymous = Tokens.load(None).identify(None)
    assert anonymous.max_points == 4096 and anonymous.allows("anything")
    with pytest.raises(turbdb.LimitExceededError, match="personal token"):
        anonymous.check_points(4097)


def test_a_token_made_by_the_cli_keeps_its_rate_to_the_last_digit(tmp_path):
    from click.testing import CliRunner

    from turbdb.cli import main

    made = CliRunner().invoke(main, ["token", "alice", "--requests-per-minute", "123456789"])
    assert made.exit_code == 0 and "requests_per_minute = 123456789\n" in made.output
    (tmp_path / "t.toml").write_text(made.output)
    assert Tokens.load(tmp_path / "t.toml").named()[0][1].requests_per_minute == 123456789
    for refused, words in ((["token", "anonymous"], "names use without a token"),
                           (["token", "bob", "--datasets", ","], "names no dataset")):
        ran = CliRunner().invoke(main, refused)
        assert ran.exit_code == 2 and words in ran.output


@pytest.mark.parametrize("text, words", [
    ("[anonymous\n", "not valid TOML"),
    ("[users]\n", "unknown table"),
    ('[[token]]\nname = "x"\n', "exactly one of token"),
    ('[[token]]\ntoken = "a"\nmax_points = -1\n', "max_points must be a positive integer"),
    ('[[token]]\ntoken = "a"\ndatasets = "iso"\n', "datasets must be a list"),
    ('[anonymous]\nmax_point = 5\n', "unknown key(s) max_point"),
    ('[[token]]\ntoken = "abc"\n[[token]]\nsha256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"\n',
     "the same secret"),
    ('[anonymous]\nallowed = "false"\n', "allowed must be true or false (no quotes)"),
    ('token = "abc"\n', "tokens are [[token]] tables"),
    ('anonymous = 5\n', "anonymous must be a table"),
    ('[[token]]\nsha256 = "zz"\n', "not 64 hexadecimal digits"),
    ('[[token]]\ntoken = "abc1"\nname = "x"\n[[token]]\ntoken = "abc2"\nname = "x"\n', "named 'x', as another is"),
    ('[[token]]\ntoken = "abc"\nrequests_per_minute = inf\n', "positive, finite number"),
    ('[[token]]\ntoken = "abc"\nrequests_per_minute = nan\n', "positive, finite number"),
    ('[[token]]\ntoken = "abc"\nmax_points = true\n', "max_points must be a positive integer"),
    ('[[token]]\ntoken = "abc"\nname = "anonymous"\n', "the name of use without a token"),
])
def test_mistakes_in_a_tokens_file_are_named(tmp_path, text, words):
    path = tmp_path / "tokens.toml"
    path.write_text(text)
    with pytest.raises(turbdb.FormatError) as error:
        Tokens.load(path)
    assert words in str(error.value)


def test_the_rate_limiter_allows_a_minutes_burst_then_refills():
    tokens = Tokens.from_document({"token": [{"token": "t", "requests_per_minute": 3}]})
    limits = tokens.identify("t")
    for _ in range(3):
        tokens.take(limits, now=100.0)
    with pytest.raises(turbdb.LimitExceededError) as refused:
        tokens.take(limits, now=100.0)
    assert refused.value.retry_after == pytest.approx(20.0)
    tokens.take(limits, now=120.5)  # one request per 20 s comes back


def test_admission_keeps_points_in_flight_within_capacity_in_arrival_order():
    async def scenario():
        limiter = PointsLimiter(100, timeout=5)
        order, running = [], []

        async def request(name, points, hold):
            async with limiter.admit(points):
                running.append(limiter.used)
                order.append(name)
                await asyncio.sleep(hold)

        await asyncio.gather(request("a", 60, 0.05), request("big", 500, 0.01), request("b", 30, 0.01),
                             request("c", 10, 0.01))
        return order, running, limiter

    order, running, limiter = asyncio.run(scenario())
    assert order[:2] == ["a", "big"] and max(running) <= 100 and limiter.used == 0 and limiter.peak == 100


def test_admission_gives_up_after_its_timeout():
    async def scenario():
        limiter = PointsLimiter(10, timeout=0.05)
        async with limiter.admit(10):
            with pytest.raises(BusyError, match="at capacity"):
                async with limiter.admit(1):
                    pass
        return limiter

    limiter = asyncio.run(scenario())
    assert limiter.used == 0 and not limiter._queue


def test_npy_round_trips_and_matches_numpy():
    for array in (np.arange(12.0).reshape(4, 3), np.zeros((0, 3), np.float32), np.ones((2, 3, 6), ">f8")):
        buffer = io.BytesIO()
        np.save(buffer, array)
        assert npy_header(array.dtype, array.shape) == buffer.getvalue()[:len(buffer.getvalue()) - array.nbytes]
        assert encode_npy(array) == buffer.getvalue()
        np.testing.assert_array_equal(decode_npy(buffer.getvalue()), array)
    fortran = io.BytesIO()
    np.save(fortran, np.asfortranarray(np.arange(6.0).reshape(2, 3)))
    np.testing.assert_array_equal(decode_npy(fortran.getvalue()), np.arange(6.0).reshape(2, 3))


@pytest.mark.parametrize("body, words", [
    (b"", "not a .npy"),
    (b"\x93NUMPY\x09\x00\x00\x00", "unsupported .npy format version"),
    (b"\x93NUMPY\x01\x00\xff\x00{", "truncated"),
    (b"\x93NUMPY\x01\x00\x10\x00{'descr': 1}    ", "does not parse"),
    (npy_header("<U4", (2,)) + b"\0" * 32, "dtype <U4"),
    (npy_header("<f8", (2, 3)) + b"\0" * 47, "needs 48"),
])
def test_bad_npy_bodies_are_refused_with_a_reason(body, words):
    with pytest.raises(turbdb.FormatError) as error:
        decode_npy(body)
    assert words in str(error.value)
    with pytest.raises(turbdb.LimitExceededError):
        decode_npy(encode_npy(np.zeros((100, 3))), max_bytes=1000)


def test_the_streamed_netcdf_opens_with_xarray(tmp_path):
    data = np.random.default_rng(0).standard_normal((5, 4, 3, 3)).astype(np.float32)
    stream = NetCDFStream({"z": 5, "y": 4, "x": 3, "component": 3, "strlen": 2},
                          {"x": (("x",), "f8", {}), "x_index": (("x",), "i4", {}),
                           "component": (("component", "strlen"), "S1", {"_Encoding": "utf-8"}),
                           "u": (("z", "y", "x", "component"), "f4", {"coordinates": "x_index"})},
                          {"dataset": "d", "time": 0.5, "time_index": 1})
    body = stream.header() + stream.small_data("x", [0.0, 0.5, 1.0]) + stream.small_data("x_index", [0, 1, 2])
    body += stream.small_data("component", ["ux", "uy", "uz"])
    body += b"".join(data[k:k + 1].astype(">f4").tobytes() for k in range(5))  # slab by slab
    assert len(body) == stream.total_bytes()
    (tmp_path / "c.nc").write_bytes(body)
    for engine in ("scipy", "netcdf4"):
        with xarray.open_dataset(tmp_path / "c.nc", engine=engine) as opened:
            np.testing.assert_array_equal(opened["u"].values, data)
            assert list(opened["component"].values) == ["ux", "uy", "uz"] and opened.attrs["time_index"] == 1
            np.testing.assert_array_equal(opened["x_index"].values, [0, 1, 2])


def test_anonymous_callers_are_rated_per_address():
    tokens = Tokens.from_document({"anonymous": {"requests_per_minute": 1}})
    anonymous = tokens.identify(None)
    tokens.take(anonymous, now=5.0, key="anonymous@10.0.0.1")
    tokens.take(anonymous, now=5.0, key="anonymous@10.0.0.2")  # another address has its own minute
    with pytest.raises(turbdb.LimitExceededError, match="anonymous use may send 1 requests per minute"):
        tokens.take(anonymous, now=6.0, key="anonymous@10.0.0.1")
