"""Arrays answered as JSON: encoded a slice at a time, the very numbers json.dumps of the
whole list wrote, so that a large answer does not hold every number as a Python float, and
fast (orjson)."""

import io
import json
import tracemalloc

import numpy as np
import pytest

from turbdb.service import json_answers

from servicekit import FULL, random_points


def whole(values):
    """The answer as json.dumps encoded it: the whole list at once, with what JSON cannot
    hold (NaN, infinities) written as null and counted."""
    document = {"shape": list(values.shape), "dtype": str(values.dtype)}
    missing = int(values.size - np.count_nonzero(np.isfinite(values)))
    if missing:
        document.update(non_finite=missing, non_finite_note=json_answers.NON_FINITE_NOTE)
    document["values"] = values.tolist()
    return json_answers.with_nulls(json.dumps(document)).encode()


@pytest.mark.parametrize("shape", [(50, 3), (50, 3, 3), (3, 40, 3), (2, 3, 40), (0, 3), (7,), ()])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_chunks_hold_the_very_numbers_of_the_whole_encoding(monkeypatch, shape, dtype):
    monkeypatch.setattr(json_answers, "CHUNK_VALUES", 7)  # many chunks, rows larger than one
    values = np.random.default_rng(1).normal(size=shape).astype(dtype)
    if values.size > 3:
        values.flat[:3] = (np.nan, np.inf, -0.0)
    if values.size > 6:
        values.flat[3:6] = (1e-5, 3e38, np.finfo(dtype).tiny)  # exponents both ways, the smallest normal
    # Valid JSON for a strict parser (no NaN or Infinity), and the same document, number for
    # number (float64 equality, the sign of zero too), as json.dumps wrote.
    strict = {"parse_constant": lambda c: pytest.fail(f"{c} in JSON")}
    answered = json.loads(b"".join(json_answers.array_chunks(values)), **strict)
    expected = json.loads(whole(values))
    assert answered == expected
    assert np.array_equal(np.signbit(np.array(answered["values"], dtype=float)),
                          np.signbit(np.array(expected["values"], dtype=float)))
    nulls = not np.isfinite(values).all()
    listed = json.loads(b"".join(json_answers.list_chunks(values, nulls)), **strict)
    assert listed == json.loads(json_answers.with_nulls(json.dumps(values.tolist())))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_, np.float16])
def test_other_dtypes_are_written_as_json_dumps_writes_them(dtype):
    values = (np.arange(12).reshape(4, 3) % 3).astype(dtype)
    assert json.loads(b"".join(json_answers.list_chunks(values))) == values.tolist()


def test_a_lone_non_finite_value_is_null_too():
    assert json_answers.with_nulls(json.dumps(float("nan"))) == "null"
    assert b"".join(json_answers.array_chunks(np.array(np.inf, np.float32))).endswith(b'"values": null}')


def test_a_large_answer_is_encoded_in_a_few_megabytes_not_a_hundred():
    values = np.random.default_rng(2).normal(size=(100_000, 3, 3))  # a 10⁵-point float64 gradient: 7.2 MB
    tracemalloc.start()
    try:
        size = sum(len(chunk) for chunk in json_answers.array_chunks(values))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size > 15e6
    assert peak < 20e6, f"{peak / 1e6:.0f} MB to encode a {size / 1e6:.0f} MB answer"  # the whole list took ~100


def test_the_server_streams_a_large_json_answer_and_it_holds_the_npy_answers_values(server):
    points = {"points": random_points(12_000, seed=5).tolist()}
    params = {"field": "velocity", "time": 0.5, "operator": "gradient", "dtype": "float64"}
    headers = {"Authorization": f"Bearer {FULL}"}
    as_json = server.post("/v1/datasets/trig/query", params=params, json=points, headers=headers)
    as_npy = server.post("/v1/datasets/trig/query", params=params, json=points,
                         headers={**headers, "Accept": "application/x-npy"})
    assert as_json.status_code == as_npy.status_code == 200, as_json.text
    assert as_json.headers.get("transfer-encoding") == "chunked"  # streamed, not built whole
    document = as_json.json()
    assert document["shape"] == [12_000, 3, 3] and document["dtype"] == "float64"
    np.testing.assert_allclose(np.array(document["values"]), np.load(io.BytesIO(as_npy.content)), rtol=1e-13,
                               atol=1e-13)
