"""pytest plugin (registered through `pytest11`): a `graphcheck` fixture and the `graph_safe` marker.

    def test_decode_is_capturable(graphcheck):
        assert graphcheck.capture(my_target()) == []

    @pytest.mark.graph_safe
    def test_sampler_does_not_sync():
        sample(logits)          # any host sync in the body fails the test, naming the line
"""
from __future__ import annotations

import pytest

from .options import DEVICE, STEPS, WARMUP


class GraphcheckFixture:
    """Audit or capture a Target inside a test; each returns the list of findings (empty when clean)."""

    def audit(self, target, steps: int = STEPS, warmup: int = WARMUP, strict: bool = False):
        from graphcheck.runtime.audit import audit
        return audit(target, steps=steps, warmup=warmup, strict=strict)

    def capture(self, target, steps: int = STEPS, warmup: int = WARMUP, device: str = DEVICE):
        from graphcheck.runtime.capture import capture_test
        return capture_test(target, steps=steps, warmup=warmup, device=device)

    def no_sync(self):
        from graphcheck.runtime.guards import no_sync
        return no_sync()

    @staticmethod
    def describe(findings) -> str:
        return "\n".join(f"{f.path}:{f.line} {f.rule} {f.message}" for f in findings)


def pytest_configure(config):
    config.addinivalue_line("markers", "graph_safe: fail the test if its body performs a host sync or capture hazard")


@pytest.fixture
def graphcheck():
    return GraphcheckFixture()


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("graph_safe") is None:
        yield
        return
    from graphcheck.runtime.guards import no_sync
    with no_sync():
        yield
