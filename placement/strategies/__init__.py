"""Strategy registry: for each strategy name, the picker the fast and the reference engine use."""

from __future__ import annotations

from collections.abc import Callable

from ..state import AuctionState
from .base import Picker

PickerFactory = Callable[[AuctionState], Picker]


def _registry() -> tuple[dict[str, PickerFactory], dict[str, PickerFactory]]:
    from .diego_fast import DiegoFast
    from .diego_reference import DiegoReference

    fast: dict[str, PickerFactory] = {"diego": DiegoFast}
    reference: dict[str, PickerFactory] = {"diego": DiegoReference}
    # Each further strategy module registers `FAST` and `REFERENCE` pickers.
    import importlib

    for module_name in ("dea", "loadmark", "service", "objective", "binpack", "random_pick"):
        try:
            module = importlib.import_module(f"{__name__}.{module_name}")
        except ModuleNotFoundError as exc:  # a strategy not written yet must not break the others
            if exc.name != f"{__name__}.{module_name}":
                raise
            continue
        fast[module.NAME] = module.FAST
        reference[module.NAME] = module.REFERENCE
    return fast, reference


_CACHE: dict[str, dict[str, PickerFactory]] = {}


def pickers(engine: str) -> dict[str, PickerFactory]:
    if not _CACHE:
        _CACHE["fast"], _CACHE["reference"] = _registry()
    try:
        return _CACHE[engine]
    except KeyError:
        raise ValueError(f"unknown engine {engine!r}: expected fast or reference") from None
