pytest_plugins = ["pytester"]

import os
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).with_name("data")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # the scanner's per-file cache and the tiny checkpoint are per-session, never the user's
    monkeypatch.setenv("GRAPHCHECK_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "gc-cache"))
    monkeypatch.setenv("DSV4_CACHE_DIR", os.environ.get("DSV4_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "dsv4-cache")))


def scan_source(tmp_path: Path, src: str, name: str = "mod.py", entry_points=None, **kw):
    from graphcheck.static.scanner import scan
    p = tmp_path / name
    p.write_text(textwrap.dedent(src))
    return scan([str(p)], entry_points=entry_points, root=tmp_path, cache=False, jobs=1, **kw).findings


@pytest.fixture
def scan_src(tmp_path):
    def run(src, **kw):
        return scan_source(tmp_path, src, **kw)
    return run
