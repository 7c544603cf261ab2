"""`--image REF` and a private registry's credentials for `vendue push`, `vendue task run` and `vendue apply`.

Credentials never come from argv (every local user reads it, `ps`): from `--registry-credentials-file FILE`
(one line `user:password`, or JSON `{"username": ..., "password": ...}`), else from VENDUE_REGISTRY_USERNAME
and VENDUE_REGISTRY_PASSWORD. The BBS keeps them sealed and shows them to nobody (docs/containers.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from .cli_style import USAGE_ERROR, fail

USERNAME_ENV = "VENDUE_REGISTRY_USERNAME"
PASSWORD_ENV = "VENDUE_REGISTRY_PASSWORD"
MAX_CREDENTIALS_FILE_BYTES = 64 * 1024

ImageOption = Annotated[str | None, typer.Option(
    "--image", help="Run in this OCI image: a registry reference by tag or digest, pinned to its digest by "
    "the BBS; COMMAND may then be left out for the image's entrypoint and cmd (docs/containers.md).")]
CredentialsFileOption = Annotated[Path | None, typer.Option(
    "--registry-credentials-file", help="The image registry's credentials: `user:password` or JSON "
    f"{{\"username\", \"password\"}} (default: ${USERNAME_ENV} and ${PASSWORD_ENV}).")]


def read_credentials_file(path: Path) -> dict[str, str]:
    """{username, password} from `path`; raises ValueError saying what is wrong (never the content)."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CREDENTIALS_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_CREDENTIALS_FILE_BYTES:
        raise ValueError(f"{path} is over {MAX_CREDENTIALS_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None
    if text.startswith("{"):
        try:
            document = json.loads(text)
        except ValueError:
            raise ValueError(f"{path}: not valid JSON") from None
        username, password = document.get("username"), document.get("password")
        if not isinstance(username, str) or not isinstance(password, str) or not username or not password:
            raise ValueError(f"{path}: expected JSON with a non-empty \"username\" and \"password\"")
        return {"username": username, "password": password}
    username, sep, password = text.partition(":")
    if not sep or not username or not password or "\n" in text:
        raise ValueError(f"{path}: expected one line `user:password`")
    return {"username": username, "password": password}


def registry_credentials(path: Path | None) -> dict[str, str] | None:
    """The credentials the command line points at (the file, else the environment), None without any;
    a usage error (exit 2, one line) when they are malformed or half given."""
    if path is not None:
        try:
            return read_credentials_file(path)
        except ValueError as exc:
            fail(f"--registry-credentials-file: {exc}", USAGE_ERROR)
    username, password = os.environ.get(USERNAME_ENV), os.environ.get(PASSWORD_ENV)
    if username is None and password is None:
        return None
    if not username or not password:
        fail(f"registry credentials: set both {USERNAME_ENV} and {PASSWORD_ENV}, or neither", USAGE_ERROR)
    return {"username": username, "password": password}


def image_field(ref: str | None, credentials_file: Path | None) -> dict[str, Any] | None:
    """The request's `image` for `--image REF` (None without one). Credentials without an image are an
    error only when a file was named: the environment's may be meant for another command."""
    if ref is None:
        if credentials_file is not None:
            fail("--registry-credentials-file: only with --image", USAGE_ERROR)
        return None
    image: dict[str, Any] = {"ref": ref}
    credentials = registry_credentials(credentials_file)
    if credentials is not None:
        image["credentials"] = credentials
    return image


def shown_image(image: Any) -> str:
    """`ref (sha256:abcdef123456)`: an image as a person reads it, its pinned digest shortened."""
    if image is None:
        return ""
    ref = getattr(image, "ref", None) or (image.get("ref") if isinstance(image, dict) else "")
    digest = getattr(image, "digest", None) or (image.get("digest") if isinstance(image, dict) else None)
    return f"{ref} ({digest[:19]})" if digest else str(ref)
