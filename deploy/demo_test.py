"""`vendue demo`, the README's main job, runs to completion (with TLS, as the admin) and cleans up after
itself."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from .demo import run_demo

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_demo_runs_every_step_and_succeeds():
    out = io.StringIO()
    code = run_demo(Console(file=out, width=160))
    text = out.getvalue()
    assert code == 0, text
    for step in (
        "1. start",
        "2. push web",
        "3. run a one-off task",
        "4. kill -9",
        "5. stop one cell",
        "6. shut down",
    ):
        assert step in text, f"expected step {step!r} in the output:\n{text}"
    assert "6 x 7 = 42" in text, text
    assert re.search(r"crash count 1", text), text
    assert "moved from cell-" in text and "demo complete" in text, text
    assert "every component serves HTTPS with a certificate from the cluster CA" in text, text
