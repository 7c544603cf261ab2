"""A definition as stored: `command`, `env` and its image's registry credentials sealed with the key ring
(bbs/encryption.py), the rest in the clear in the JSON `definition` column (convergence and the API filter
on nothing inside the sealed part).

    clear, label, sealed = seal_definition(ring, "tasks", guid, definition)   # what a row holds
    definition = open_definition(ring, "tasks", guid, clear, label, sealed)   # the record's again

The associated data names the table, the row and the column, so a sealed value copied into another row
(or from a task into a desired LRP of the same guid) does not open.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar, cast

from ..encryption import KeyRing, KeyRingError, no_key_ring
from ..records import DesiredDefinition, TaskDefinition
from .database import json_dumps

Definition = TypeVar("Definition", DesiredDefinition, TaskDefinition)

# `diego`: the Diego message a definition was desired with holds its command and env too.
SECRET_FIELDS = frozenset({"command", "env", "diego"})
# The image's `credentials` (common/models/image.py) travel in the sealed part under this name; the image's
# ref and digest stay in the clear.
SEALED_CREDENTIALS = "image_credentials"
SEALED_COLUMN = "sealed"


def associated_data(table: str, guid: str) -> bytes:
    return f"{table}/{guid}/{SEALED_COLUMN}".encode()


def clear_part(definition: Mapping[str, Any]) -> dict[str, Any]:
    """What of `definition` is stored in the clear: all but command, env and the image's credentials."""
    clear = {name: value for name, value in definition.items() if name not in SECRET_FIELDS}
    image = clear.get("image")
    if isinstance(image, Mapping) and image.get("credentials") is not None:
        clear["image"] = {name: value for name, value in image.items() if name != "credentials"}
    return clear


def seal_definition(
    ring: KeyRing | None, table: str, guid: str, definition: Mapping[str, Any]
) -> tuple[Mapping[str, Any], str | None, str | None]:
    """(definition without command, env and credentials, the active key's label, those sealed); without a
    ring, (definition, None, None). A definition without any still gets a sealed (empty) part, so every
    row a ring wrote carries its label and rotate-keys passes over it."""
    if ring is None:
        return definition, None, None
    secret = {name: value for name, value in definition.items() if name in SECRET_FIELDS}
    image = definition.get("image")
    if isinstance(image, Mapping) and image.get("credentials") is not None:
        secret[SEALED_CREDENTIALS] = image["credentials"]
    sealed = ring.seal(json_dumps(secret).encode(), associated_data(table, guid))
    return clear_part(definition), ring.active, sealed


def open_definition(
    ring: KeyRing | None, table: str, guid: str, clear: Definition, label: str | None, sealed: str | None
) -> Definition:
    """The whole definition of a row: `clear` (a dict decoded for this row alone, completed in place) with
    the sealed part opened. Raises KeyRingError when the ring (or its key `label`) is missing, and
    encryption.UndecryptableValue when the sealed part does not open for this row."""
    if label is None:
        return clear
    if ring is None:
        raise KeyRingError(no_key_ring(label))
    opened = json.loads(ring.open(label, sealed or "", associated_data(table, guid)))
    credentials = opened.pop(SEALED_CREDENTIALS, None)
    clear.update(opened)
    image = cast(dict[str, Any], clear).get("image")
    if credentials is not None and isinstance(image, dict):
        image["credentials"] = credentials
    return clear
