"""The boundary between graphcheck and the user's step: what the target's own code may not decide.

A step that calls `sys.exit(0)` would end graphcheck with the exit code the target chose (a passing gate, with no
output and no report); one that raises KeyboardInterrupt itself would look like Ctrl-C; one that hangs would
hang CI with nothing on screen. `guarded(target, timeout)` wraps `step`, `make_inputs` and `state` so that each
of these becomes `StepAborted`, which the layers turn into a GC006 row (could not check: exit 2, never baselined).

StepAborted derives from BaseException, not Exception: the layers' own `except Exception` (a capture that fails, a
replay that raises) must not mistake an aborted step for a verdict on the code; it ends the layer for that target.
A real Ctrl-C (SIGINT delivered to the process) stays KeyboardInterrupt: graphcheck's "interrupted", exit 130.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Callable

from ..options import STEP_TIMEOUT as DEFAULT_STEP_TIMEOUT    # per call; a decode step's first (compiling) call included
# After the timeout a step stuck in native code cannot be interrupted by an exception: the watchdog then ends the
# process itself, with the one-line error, this long after the timeout fired.
HARD_GRACE = 30.0


class StepAborted(BaseException):
    """The target's own code ended its call: SystemExit, a KeyboardInterrupt it raised itself, or the timeout."""

    def __init__(self, what: str, detail: str):
        super().__init__(f"{what} {detail}")
        self.what, self.detail = what, detail


def _describe_exit(e: SystemExit) -> str:
    code = e.code
    return f"raised SystemExit({code!r}) (sys.exit in the target; graphcheck decides the exit code)"


class _Guard:
    """One wrapped callable of a target. Re-entrant calls (make_inputs inside step) are not timed twice."""

    def __init__(self, fn: Callable, what: str, timeout: float | None, active: list[bool]):
        self.fn, self.what, self.timeout, self.active = fn, what, timeout, active
        self.__wrapped__ = fn        # Target.location() and inspect.unwrap find the user's function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.active[0]:
            return self.fn(*args, **kwargs)
        main = threading.current_thread() is threading.main_thread()
        interrupted = [False]
        fired = [False]
        prev_int = prev_alrm = None
        timer = None

        def on_sigint(signum, frame):            # a real Ctrl-C: remembered, then handled as before
            interrupted[0] = True
            if callable(prev_int):
                prev_int(signum, frame)
            raise KeyboardInterrupt

        def on_alarm(signum, frame):
            fired[0] = True
            raise StepAborted(self.what, f"ran past the step timeout of {self.timeout:g} s (--step-timeout, "
                                         "[tool.graphcheck] step-timeout)")

        def hard_stop():                         # native code that never returns to Python: nothing else can end it
            sys.stderr.write(f"graphcheck: error: the target's {self.what} ran past the step timeout of "
                             f"{self.timeout:g} s and did not return to Python within {HARD_GRACE:g} s more "
                             "(stuck in native code); nothing was checked or written\n")
            sys.stderr.flush()
            os._exit(2)

        if main:
            prev_int = signal.signal(signal.SIGINT, on_sigint)
            if self.timeout:
                prev_alrm = signal.signal(signal.SIGALRM, on_alarm)
                signal.setitimer(signal.ITIMER_REAL, self.timeout)
        if self.timeout:
            timer = threading.Timer(self.timeout + (HARD_GRACE if main else 0.0), hard_stop)
            timer.daemon = True
            timer.start()
        self.active[0] = True
        try:
            return self.fn(*args, **kwargs)
        except SystemExit as e:
            raise StepAborted(self.what, _describe_exit(e)) from None
        except KeyboardInterrupt:
            if interrupted[0]:
                raise
            raise StepAborted(self.what, "raised KeyboardInterrupt itself (no Ctrl-C was pressed)") from None
        finally:
            self.active[0] = False
            if timer is not None:
                timer.cancel()
            if main:
                if self.timeout:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    signal.signal(signal.SIGALRM, prev_alrm if prev_alrm is not None else signal.SIG_DFL)
                signal.signal(signal.SIGINT, prev_int if prev_int is not None else signal.default_int_handler)


def guarded(target, timeout: float | None = DEFAULT_STEP_TIMEOUT):
    """A copy of `target` whose step, make_inputs and state raise StepAborted instead of exiting, interrupting or
    hanging (timeout in seconds per call; None or 0: no limit). The original target is left as it was."""
    import dataclasses
    if getattr(target, "_graphcheck_guarded", False):
        return target
    active = [False]
    g = dataclasses.replace(target, step=_Guard(target.step, "step", timeout, active),
                            make_inputs=_Guard(target.make_inputs, "make_inputs", timeout, active),
                            state=_Guard(target.state, "state", timeout, active))
    g._graphcheck_guarded = True
    return g
