"""Every code block of README.md and docs/*.md runs, in document order, as a reader would run
it — the ones that talk to a server against a real `turbdb serve`.

How blocks are run (the convention for whoever writes the docs):

- ```python blocks of one file run one after the other in one Python process and one
  namespace (a later block may use what an earlier one defined). ```sh, ```bash, ```shell
  and ```console blocks run in ``bash -e -o pipefail`` in the same working directory,
  interleaved with the python blocks in document order; ``$ `` prompts are stripped.
  turbdb's command line and python are on PATH.
- ```toml and ```json blocks are parsed: they must be valid. Any other fence (plain,
  text, csharp, …) is shown text and is not run.
- A block that cannot run gets, on the line right before its fence (indented like it), the
  marker ``<!-- snippet: skip — <why> -->``; the reason is required. Say why in words a
  reader understands (it runs for minutes, it needs files you bring, …).
- Blocks run in a scratch directory holding ``data/``: a small stand-in for the default
  dataset ``isotropic64`` (16³ instead of 64³, but the default dataset's 100 stored times,
  from turbdb's own DNS configuration, and its fields), served by a real
  ``turbdb serve data`` with the defaults of ``make serve`` (anonymous use only, its
  default limits). The address ``http://127.0.0.1:8000`` in a block is replaced by that
  server's.
"""

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import turbdb
from turbdb.simulate import DNSConfig, synthetic_snapshots

from servicekit import running_server

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCUMENTED_URL = "http://127.0.0.1:8000"
RUN = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh", "console": "sh",
       "toml": "toml", "json": "json"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(?P<directive>\S+)\s*(?:[—–-]+\s*(?P<reason>.*?))?\s*-->\s*$")


@dataclass
class Block:
    document: str
    line: int  # 1-based line of the opening fence
    lang: str  # python, sh, toml, json, or "" (shown, not run)
    code: str
    skip: str | None  # the reason, when marked


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, their language and skip markers."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        end = i + 1
        while end < len(lines) and not (lines[end].strip().startswith(fence[0] * len(fence))
                                        and lines[end].strip().strip(fence[0]) == ""):
            end += 1
        code = "\n".join(line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1:end])
        marker = MARKER.match(lines[i - 1]) if i else None
        skip = None
        if marker:
            if marker["directive"] != "skip":
                raise AssertionError(f"{path.name}:{i}: unknown snippet marker {marker['directive']!r} (only 'skip')")
            if not marker["reason"]:
                raise AssertionError(f"{path.name}:{i}: a skipped block needs a reason: <!-- snippet: skip — why -->")
            skip = marker["reason"]
        found.append(Block(path.name, i + 1, RUN.get(opening["lang"].lower(), ""), code, skip))
        i = end + 1
    return found


RUNNER = r"""
import json, subprocess, sys, tomllib, traceback
namespace = {"__name__": "__main__"}
for block in json.load(open(sys.argv[1])):
    where = f"{block['document']}, block at line {block['line']} ({block['lang']})"
    print(f"--- {where}", flush=True)
    try:
        if block["lang"] == "python":
            exec(compile(block["code"], where, "exec"), namespace)
        elif block["lang"] == "sh":
            subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block["code"]], check=True)
        elif block["lang"] == "toml":
            tomllib.loads(block["code"])
        elif block["lang"] == "json":
            json.loads(block["code"])
    except BaseException:
        print(f"FAILED: {where}\n{block['code']}", flush=True)
        traceback.print_exc()
        sys.exit(1)
"""


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """The reader's working directory: ``data/`` with the stand-in ``isotropic64``."""
    folder = tmp_path_factory.mktemp("reader")
    config = DNSConfig(n=64)  # the default dataset's stored times (make dataset)
    stored_dt = config.default_save_every * config.dt
    ds = turbdb.create_dataset(folder / "data", "isotropic64", grid=(16, 16, 16), times=np.arange(100) * stored_dt,
                               fields={"velocity": {"ncomp": 3, "units": "box units"},
                                       "pressure": {"ncomp": 1, "units": "box units"}})
    for snapshot in synthetic_snapshots(16, n_steps=100, dt=stored_dt, seed=0):
        ds.write("velocity", snapshot.step, snapshot.velocity)
        ds.write("pressure", snapshot.step, snapshot.pressure)
    return folder


@pytest.fixture(scope="module")
def reader_server(scratch):
    with running_server(scratch / "data", scratch / "server.log") as server:  # make serve's defaults
        yield server


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_code_block_runs(document, scratch, reader_server):
    found = blocks(document)
    runnable = [b for b in found if b.lang and b.skip is None]
    for block in runnable:
        block.code = block.code.replace(DOCUMENTED_URL, reader_server.url)
        if block.lang == "sh":
            block.code = "\n".join(line[2:] if line.startswith("$ ") else line for line in block.code.splitlines())
    listing = scratch / f"{document.stem}.blocks.json"
    listing.write_text(json.dumps([vars(b) for b in runnable]))
    env = {key: value for key, value in os.environ.items() if key != "TURBDB_TOKEN"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    run = subprocess.run([sys.executable, "-c", RUNNER, str(listing)], cwd=scratch, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, f"{run.stdout[-6000:]}\n{run.stderr[-6000:]}"
    assert run.stdout.count("--- ") == len(runnable)


def test_blocks_are_found_with_their_language_indentation_and_skip_reason(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python\nx = 1\n```\n\n- item:\n  <!-- snippet: skip — needs a GPU -->\n"
                    "  ```sh\n  nvidia-smi\n  ```\n\n````text\n```nested```\n````\n\n```toml\na = 1\n```\n")
    found = blocks(page)
    assert [(b.lang, b.code, b.skip, b.line) for b in found] == [
        ("python", "x = 1", None, 3), ("sh", "nvidia-smi", "needs a GPU", 9), ("", "```nested```", None, 13),
        ("toml", "a = 1", None, 17)]
    page.write_text("<!-- snippet: skip -->\n```python\nx\n```\n")
    with pytest.raises(AssertionError, match="needs a reason"):
        blocks(page)
    page.write_text("<!-- snippet: skipp — typo -->\n```python\nx\n```\n")
    with pytest.raises(AssertionError, match="unknown snippet marker"):
        blocks(page)


def test_every_skipped_block_says_why():
    skipped = [b for document in DOCUMENTS for b in blocks(document) if b.skip is not None]
    assert all(len(b.skip.split()) >= 3 for b in skipped), [(b.document, b.line, b.skip) for b in skipped]
