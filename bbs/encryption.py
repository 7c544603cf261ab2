"""Encryption at rest: the key ring that seals what a desired LRP or task must not show in the clear.

A key ring is an active key label plus older keys that still decrypt (Diego's BBS does the same):

    {"active": "k2", "keys": {"k1": "<base64 of 32 bytes>", "k2": "<base64 of 32 bytes>"}}

It comes from a file (`--encryption-keys-file`, VENDUE_ENCRYPTION_KEYS_FILE; mode 0600 or stricter) or from
VENDUE_ENCRYPTION_KEYS holding the same JSON; never from argv, where every local user could read it.

Values are sealed with AES-256-GCM under the active key, a fresh random 96-bit nonce each (far below
the 2^32 encryptions per key where random nonces would start to risk a repeat), and associated data
naming the row and column they belong to: a ciphertext copied into another row fails to open.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12
# A label is stored beside every sealed value and named in messages: short, plain, no separators.
LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,63}$")
FILE_SETTING = "encryption_keys_file"
ENV_SETTING = "encryption_keys"  # VENDUE_ENCRYPTION_KEYS


class KeyRingError(ValueError):
    """The key ring cannot be used (unreadable, malformed, too open, or lacking a key the database
    needs): one line naming the setting, for the operator."""


class UndecryptableValue(RuntimeError):
    """A sealed value that does not open with its key: tampered with, or moved from another row."""


class KeyRing:
    def __init__(self, active: str, keys: Mapping[str, bytes], source: str = ENV_SETTING) -> None:
        """`source`: the setting the ring came from, named in messages about it."""
        self.active = active
        self.source = source
        self._ciphers = {label: AESGCM(key) for label, key in keys.items()}
        self._active_cipher = self._ciphers[active]

    @property
    def labels(self) -> list[str]:
        return sorted(self._ciphers)

    def seal(self, plaintext: bytes, associated: bytes) -> str:
        """base64(nonce || ciphertext) under the active key (whose label the caller stores beside it)."""
        nonce = os.urandom(NONCE_BYTES)
        return base64.b64encode(nonce + self._active_cipher.encrypt(nonce, plaintext, associated)).decode()

    def open(self, label: str, sealed: str, associated: bytes) -> bytes:
        """The plaintext of a value sealed under `label` for `associated`. Raises KeyRingError when the
        ring lacks the key, UndecryptableValue when the value does not open."""
        cipher = self._ciphers.get(label)
        if cipher is None:
            raise KeyRingError(self.lacks(label))
        try:
            raw = base64.b64decode(sealed, validate=True)
            return cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], associated)
        except (InvalidTag, binascii.Error, ValueError):
            raise UndecryptableValue(
                f"a value sealed with key {label!r} does not open for {associated.decode(errors='replace')} "
                "(altered, or copied from another row)"
            ) from None

    def lacks(self, label: str) -> str:
        return (f'{self.source}: the database holds records encrypted with key "{label}", which the key ring '
                f"(keys {', '.join(self.labels)}) lacks")


def no_key_ring(label: str) -> str:
    """The refusal of a BBS given no key ring on a database that holds sealed records."""
    return f'{FILE_SETTING}: the database holds records encrypted with key "{label}"; give the key ring'


def parse_key_ring(text: str, source: str) -> KeyRing:
    """A KeyRing from its JSON; KeyRingError naming `source` and what is wrong (never a key's value)."""
    try:
        document = json.loads(text)
    except ValueError:
        raise KeyRingError(
            f'{source}: not JSON (expected {{"active": LABEL, "keys": {{LABEL: BASE64}}}})'
        ) from None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), dict) or not document["keys"]:
        raise KeyRingError(f'{source}: expected {{"active": LABEL, "keys": {{LABEL: BASE64, ...}}}}')
    unknown = sorted(set(document) - {"active", "keys"})
    if unknown:
        raise KeyRingError(f"{source}: unknown field {unknown[0]!r}")
    keys: dict[str, bytes] = {}
    for label, encoded in document["keys"].items():
        if not LABEL.match(label):
            raise KeyRingError(
                f"{source}: key label {label!r} must be letters, digits, '.' or '-' (at most 64)"
            )
        try:
            key = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else b""
        except binascii.Error:
            key = b""
        if len(key) != KEY_BYTES:
            raise KeyRingError(f"{source}: key {label!r} must be {KEY_BYTES} random bytes in base64")
        keys[label] = key
    active = document.get("active")
    if not isinstance(active, str) or active not in keys:
        raise KeyRingError(
            f"{source}: the active key {active!r} is not among the keys ({', '.join(sorted(keys))})"
        )
    return KeyRing(active, keys, source)


def read_key_ring_file(path: Path) -> KeyRing:
    """The key ring in `path`, which only its owner may read or write (0600 or stricter)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise KeyRingError(
                f"{FILE_SETTING}: {path} is mode {mode:04o}; it holds keys, so it must be 0600 or stricter "
                f"(chmod 600 {path})"
            )
        text = path.read_text()
    except OSError as exc:
        raise KeyRingError(f"{FILE_SETTING}: cannot read {path}: {exc.strerror}") from None
    return parse_key_ring(text, FILE_SETTING)


def load_key_ring(file: Path | None, env_json: str | None) -> KeyRing | None:
    """The ring from the file or from VENDUE_ENCRYPTION_KEYS (not both: which one wins would be a guess);
    None when neither is given (encryption at rest off)."""
    if file is not None and env_json:
        raise KeyRingError(
            f"{FILE_SETTING}: give the key ring as a file or in VENDUE_ENCRYPTION_KEYS, not both"
        )
    if file is not None:
        return read_key_ring_file(file)
    if env_json:
        return parse_key_ring(env_json, ENV_SETTING)
    return None


def new_key_ring_json(label: str = "k1") -> str:
    """A fresh ring holding one random key, as JSON (what `vendue up` writes to <data-dir>/bbs-keys.json)."""
    key = base64.b64encode(os.urandom(KEY_BYTES)).decode()
    return json.dumps({"active": label, "keys": {label: key}}, indent=2) + "\n"
