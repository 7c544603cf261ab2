"""The key ring: what it accepts, what it refuses (one line naming the setting, never a key), and sealing."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from bbs.encryption import (
    KeyRing,
    KeyRingError,
    UndecryptableValue,
    load_key_ring,
    new_key_ring_json,
    parse_key_ring,
    read_key_ring_file,
)

K1 = base64.b64encode(b"1" * 32).decode()
K2 = base64.b64encode(b"2" * 32).decode()


def ring_json(active: str = "k2", **keys: str) -> str:
    return json.dumps({"active": active, "keys": keys or {"k1": K1, "k2": K2}})


def write_ring(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_ring_seals_with_its_active_key_and_opens_with_any_of_its_keys() -> None:
    old = parse_key_ring(ring_json("k1", k1=K1), "encryption_keys")
    rotated = parse_key_ring(ring_json("k2"), "encryption_keys")
    sealed_k1 = old.seal(b"secret", b"tasks/t1/sealed")
    assert (rotated.active, rotated.labels) == ("k2", ["k1", "k2"])
    assert rotated.open("k1", sealed_k1, b"tasks/t1/sealed") == b"secret"
    sealed_k2 = rotated.seal(b"secret", b"tasks/t1/sealed")
    assert rotated.open("k2", sealed_k2, b"tasks/t1/sealed") == b"secret"
    assert b"secret" not in base64.b64decode(sealed_k2)
    # A fresh nonce each time: sealing the same value twice gives different ciphertexts.
    assert rotated.seal(b"secret", b"a") != rotated.seal(b"secret", b"a")


def test_a_value_opens_only_for_the_row_and_key_it_was_sealed_for() -> None:
    ring = parse_key_ring(ring_json("k2"), "encryption_keys")
    sealed = ring.seal(b"secret", b"tasks/t1/sealed")
    with pytest.raises(UndecryptableValue, match="tasks/t2/sealed"):
        ring.open("k2", sealed, b"tasks/t2/sealed")
    with pytest.raises(UndecryptableValue):
        ring.open("k1", sealed, b"tasks/t1/sealed")  # the label beside it changed
    tampered = base64.b64decode(sealed)
    tampered = tampered[:-1] + bytes([tampered[-1] ^ 1])
    with pytest.raises(UndecryptableValue):
        ring.open("k2", base64.b64encode(tampered).decode(), b"tasks/t1/sealed")
    with pytest.raises(KeyRingError) as lacking:
        ring.open("k0", sealed, b"tasks/t1/sealed")
    assert str(lacking.value) == (
        'encryption_keys: the database holds records encrypted with key "k0", which the key ring (keys k1, '
        'k2) lacks'
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "encryption_keys: not JSON"),
        ("[]", 'encryption_keys: expected {"active": LABEL, "keys": {LABEL: BASE64, ...}}'),
        ('{"active": "k1", "keys": {}}', "encryption_keys: expected"),
        (ring_json("k3"), "encryption_keys: the active key 'k3' is not among the keys (k1, k2)"),
        (
            ring_json("k1", k1=base64.b64encode(b"short").decode()),
            "encryption_keys: key 'k1' must be 32 random bytes",
        ),
        (ring_json("k1", k1="not base64!"), "encryption_keys: key 'k1' must be 32 random bytes"),
        (ring_json("a:b", **{"a:b": K1}), "encryption_keys: key label 'a:b' must be letters, digits"),
        (
            json.dumps({"active": "k1", "keys": {"k1": K1}, "extra": 1}),
            "encryption_keys: unknown field 'extra'",
        ),
    ],
)
def test_a_malformed_ring_is_refused_with_one_line_naming_the_setting(text: str, message: str) -> None:
    with pytest.raises(KeyRingError) as refused:
        parse_key_ring(text, "encryption_keys")
    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value) and K1 not in str(refused.value)


def test_a_keys_file_others_may_read_is_refused(tmp_path: Path) -> None:
    path = write_ring(tmp_path / "keys.json", ring_json(), mode=0o644)
    with pytest.raises(KeyRingError) as refused:
        read_key_ring_file(path)
    assert str(refused.value) == (
        f"encryption_keys_file: {path} is mode 0644; it holds keys, so it must be 0600 or stricter (chmod "
        f"600 {path})"
    )
    path.chmod(0o400)
    assert read_key_ring_file(path).active == "k2"
    with pytest.raises(KeyRingError, match=f"encryption_keys_file: cannot read {tmp_path / 'nope.json'}"):
        read_key_ring_file(tmp_path / "nope.json")


def test_the_ring_comes_from_the_file_or_the_environment_not_both(tmp_path: Path) -> None:
    path = write_ring(tmp_path / "keys.json", ring_json("k1", k1=K1))
    assert load_key_ring(None, None) is None
    assert load_key_ring(path, None).source == "encryption_keys_file"
    assert load_key_ring(None, ring_json()).source == "encryption_keys"
    with pytest.raises(KeyRingError, match="not both"):
        load_key_ring(path, ring_json())


def test_a_new_ring_holds_one_random_key() -> None:
    first, second = json.loads(new_key_ring_json()), json.loads(new_key_ring_json())
    assert first["active"] == "k1" and list(first["keys"]) == ["k1"]
    assert len(base64.b64decode(first["keys"]["k1"])) == 32 and first["keys"] != second["keys"]
    assert isinstance(parse_key_ring(new_key_ring_json(), "encryption_keys"), KeyRing)

