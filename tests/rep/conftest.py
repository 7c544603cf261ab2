"""The rep process tests' fixtures (tests/rep/fakes.py)."""

from tests.rep.fakes import fake_bbs, start_rep  # noqa: F401 - fixtures
