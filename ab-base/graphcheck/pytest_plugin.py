"""pytest plugin (registered through `pytest11`): a `graphcheck` fixture and the `graph_safe` marker.

    def test_decode_is_capturable(graphcheck):
        assert graphcheck.capture(my_target()) == []

    @pytest.mark.graph_safe
    def test_sampler_does_not_sync():
        sample(logits)          # any host sync in the body fails the test, naming the line

The marker's body is not a step: the model and inputs it builds are setup, which `audit`/`capture` run outside the
audited step. So, as there, building them is not a finding, wherever they are built (the body or a fixture): the
marker does not judge host-to-device traffic (GC401, GC402, GC404; whether a copy happens once or every step needs
the boundary a Target gives: use the `graphcheck` fixture's audit/capture for it). Every readback, sync,
data-dependent shape and host RNG draw in the body, or in what it calls, fails the test at its line.
"""
from __future__ import annotations

import pytest

from .options import DEVICE, STEP_TIMEOUT, STEPS, WARMUP


class GraphcheckFixture:
    """Audit or capture a Target inside a test; each returns the list of findings (empty when clean)."""

    def audit(self, target, steps: int = STEPS, warmup: int = WARMUP, strict: bool = False,
              step_timeout: float | None = STEP_TIMEOUT):
        from graphcheck.runtime.audit import audit
        return audit(target, steps=steps, warmup=warmup, strict=strict, step_timeout=step_timeout)

    def capture(self, target, steps: int = STEPS, warmup: int = WARMUP, device: str = DEVICE,
                step_timeout: float | None = STEP_TIMEOUT):
        from graphcheck.runtime.capture import capture_test
        return capture_test(target, steps=steps, warmup=warmup, device=device, step_timeout=step_timeout)

    def no_sync(self):
        from graphcheck.runtime.guards import no_sync
        return no_sync()

    @staticmethod
    def describe(findings) -> str:
        return "\n".join(f"{f.path}:{f.line} {f.rule} {f.message}" for f in findings)


def pytest_configure(config):
    config.addinivalue_line("markers", "graph_safe: fail the test if its body performs a host sync or capture hazard "
                                       "(host-to-device traffic is judged by the graphcheck fixture's audit/capture)")


@pytest.fixture
def graphcheck():
    return GraphcheckFixture()


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("graph_safe") is None:
        yield
        return
    from graphcheck.runtime.guards import HOST_TRAFFIC, no_sync
    with no_sync(skip=HOST_TRAFFIC):
        yield
