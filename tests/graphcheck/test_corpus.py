"""Third-party serving code nobody here wrote (HF transformers 4.46.3, fetched by corpus/fetch.py): the scan from
natural entry points, against hand-triaged expectations, must keep precision and recall at or above 0.9."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).with_name("corpus")))
import expected as E  # noqa: E402

from graphcheck.static.scanner import scan  # noqa: E402


@pytest.fixture(scope="module")
def corpus():
    root = E.ROOT()
    if not all((root / f).is_file() for f in E.FILES):
        pytest.skip(f"corpus not fetched: run `python tests/graphcheck/corpus/fetch.py` (expects {root})")
    return scan([str(root / f) for f in E.FILES], entry_points=E.ENTRY_POINTS, root=root, cache=False, jobs=1)


def test_precision_and_recall(corpus):
    got = {(f.rule, f.path, f.line) for f in corpus.findings}
    tp = got & set(E.TRUE)
    precision = len(tp) / len(got) if got else 0.0
    recall = len(tp) / len(E.TRUE)
    assert precision >= 0.9 and recall >= 0.9, (
        f"precision {precision:.2f}, recall {recall:.2f}; false: {sorted(got - set(E.TRUE))}; "
        f"missed: {sorted(set(E.TRUE) - got)}")
    assert not got & set(E.FALSE), sorted(got & set(E.FALSE))


def test_scope_reaches_the_models_through_their_containers(corpus):
    scope = set(corpus.scope)
    # decoder layers in a ModuleList comprehension; attention from a class registry indexed by config; experts
    # in a ModuleList; the rotary cache helper called from forward
    for q in ("LlamaDecoderLayer.forward", "LlamaSdpaAttention.forward", "LlamaMLP.forward",
              "MixtralSparseMoeBlock.forward", "MixtralBlockSparseTop2MLP.forward",
              "MixtralRotaryEmbedding._set_cos_sin_cache"):
        assert any(s.endswith(":" + q) for s in scope), q
    assert corpus.unresolved == [], corpus.unresolved
