"""What a person opening the server in a browser gets: GET / says what it is and links the
documentation, and /docs loads Swagger UI from the server itself (nothing from a CDN), so it
works offline; `turbdb serve` prints the limits in force and how to make a token."""

import re

import httpx
import numpy as np

import turbdb
from turbdb.service.server import access_summary
from turbdb.service.tokens import Tokens

from servicekit import prefix_proxy, running_serve


def test_the_root_says_what_the_server_is_and_links_the_docs(server):
    about = server.get("/").json()
    assert about["service"] == "turbdb" and about["datasets"] == ["other", "trig"]
    assert about["links"]["docs"] == "/docs" and about["links"]["limits"] == "/v1/limits"
    page = server.get("/", headers={"Accept": "text/html"})
    assert page.headers["content-type"].startswith("text/html")
    assert '<a href="/docs">' in page.text and "turbdb.connect(" in page.text


def test_the_docs_load_every_asset_from_the_server_itself(server):
    for path in ("/docs", "/redoc"):
        page = server.get(path)
        assert page.status_code == 200
        assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert assets and all(a.startswith("/") for a in assets), assets  # no http(s):// anywhere
        for asset in assets:
            fetched = server.get(asset)
            assert fetched.status_code == 200 and len(fetched.content) > 1000, asset
    assert server.get("/openapi.json").json()["info"]["title"] == "turbdb"


def test_the_startup_banner_states_the_limits_and_how_to_get_more(tokens_file):
    default = access_summary(Tokens.load(None), None)
    assert "anonymous use: 4,096 points per request, 60 requests per minute" in default
    assert "turbdb token alice >> tokens.toml" in default and "--tokens tokens.toml" in default
    with_file = access_summary(Tokens.load(tokens_file), str(tokens_file))
    assert "token 'full'" in with_file and "2,000,000 points per request" in with_file
    assert "full-secret" not in with_file
    typo = Tokens.from_document({"token": [{"token": "abcd1234", "name": "ann", "datasets": ["isotropic46"]}]})
    assert ("token 'ann' names dataset(s) isotropic46, which this server does not hold (isotropic64)"
            in access_summary(typo, "tokens.toml", ["isotropic64"]))
    assert "does not hold" not in access_summary(typo, "tokens.toml", ["isotropic46"])


def test_the_openapi_description_says_how_a_token_is_sent(server):
    # The /docs forms send the token given to their Authorize button (they could not).
    described = server.get("/openapi.json").json()
    assert described["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": "a turbdb token (`turbdb token NAME`)"}
    assert described["security"] == [{"bearer": []}, {}]


def test_the_openapi_description_gives_the_errors_the_server_sends(server):
    # Bad parameters answer 400 {description, error, status}, never FastAPI's 422; a cutout
    # answers .npy or NetCDF, /metrics Prometheus text, not JSON.
    described = server.get("/openapi.json").json()
    assert "HTTPValidationError" not in described["components"]["schemas"]
    for path, operations in described["paths"].items():
        for method, operation in operations.items():
            assert "422" not in operation["responses"], (method, path)
            assert operation["responses"]["4XX"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/Error"}
    assert "application/json" not in described["paths"]["/v1/datasets/{name}/cutout"]["post"]["responses"]["200"]["content"]
    from turbdb.service.metrics import CONTENT_TYPE_LATEST
    assert list(described["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == [CONTENT_TYPE_LATEST]
    answer = server.post("/v1/datasets/isotropic64/query?field=velocity&time=abc", json={"points": [[0, 0, 0]]})
    assert answer.status_code == 400 and set(answer.json()) == set(described["components"]["schemas"]["Error"]["required"])


def test_under_a_proxys_path_prefix_the_pages_links_and_messages_name_it(service_db, local, tmp_path):
    # Served as nginx's `location /turbdb/ { proxy_pass http://up/; }` serves it, /docs
    # loaded /openapi.json, and the home page's links and "see /docs" pointed, from the site's
    # root, outside the prefix.
    with running_serve(service_db, tmp_path / "prefixed.log", root_path="/turbdb/") as s, \
            prefix_proxy(s.url, "/turbdb") as proxy:
        base = proxy + "/turbdb"
        about = httpx.get(base + "/", timeout=30).json()
        assert about["links"]["docs"] == "/turbdb/docs"
        assert all(link.startswith("/turbdb/") for link in about["links"].values()), about["links"]
        page = httpx.get(base + "/", headers={"Accept": "text/html"}, timeout=30).text
        assert '<a href="/turbdb/docs">' in page and f'turbdb.connect("{base}")' in page
        for path in ("/docs", "/redoc"):
            docs = httpx.get(base + path, timeout=30)
            assets = re.findall(r'(?:src|href)="([^"]+)"', docs.text)
            assert docs.status_code == 200 and "/turbdb/openapi.json" in docs.text
            assert assets and all(a.startswith("/turbdb/") for a in assets), assets
            for asset in assets:
                assert httpx.get(proxy + asset, timeout=30).status_code == 200, asset
        described = httpx.get(base + "/openapi.json", timeout=30).json()
        assert described["servers"] == [{"url": "/turbdb"}]  # what the forms of /docs send to
        missing = httpx.get(base + "/v1/nothing", timeout=30).json()["description"]
        assert "'/turbdb/v1/nothing'" in missing and "see /turbdb/docs" in missing, missing
        pts = np.random.default_rng(0).uniform(0, 6, (50, 3))
        with turbdb.connect(base) as db:
            assert db.datasets == ["other", "trig"]
            np.testing.assert_allclose(db["trig"].query("velocity", pts, time=0.5),
                                       local["trig"].query("velocity", pts, time=0.5), rtol=1e-6, atol=1e-6)
    assert "pages and links name the root path /turbdb" in s.log.read_text()
