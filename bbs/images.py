"""Pinning images: when a desired LRP or a task names an `image`, the BBS resolves its reference to a digest
(common/registry.py) before storing anything, and fills from the image's config what the definition leaves
out (docs/containers.md, "Images"). Instances then run that digest: a tag moved in the registry changes
nothing until the definition changes (a PUT naming the tag again pins the tag's new digest: a new version).

A reference that cannot be pinned (no such repository, tag or digest, credentials refused, the registry
unreachable or answering nonsense) is a 422 naming `image` and the reason, nothing stored. An unreachable
registry is a 422 too, not a 503: the BBS cannot tell a misspelled host from one that is down, a 503 would
say the BBS itself is unavailable (and clients retry a 503), and nothing was stored either way.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from common.models import DEFAULT_STACK
from common.models.image import IMAGE_STACK
from common.registry import ImageConfig, RegistryClient, RegistryError, Resolved, registry_tls_context
from common.tls import CertError

log = logging.getLogger("bbs.images")

Body = TypeVar("Body", bound=BaseModel)

NO_COMMAND = "no command given, and the image's config has neither an entrypoint nor a cmd"


def refusal(field: str, message: str, given: Any) -> RequestValidationError:
    return RequestValidationError([{"type": "value_error", "loc": ("body", field), "msg": message,
                                    "input": given}])


def fill_from_image(given: dict[str, Any], resolved: Resolved, *, whole: bool, ports: bool = True
                    ) -> dict[str, Any]:
    """`given` (a request's fields as set, JSON) with the image pinned and its config filling the rest.

    `whole`: `given` is a whole definition (POST, PUT, a task): the command is the image's entrypoint + cmd
    when none is given, its env the defaults under the definition's, its first exposed port the port when
    none is given. Otherwise (a PATCH, merged over the stored definition) only a `command: []` given is
    filled, and `env` merged when given: what the patch leaves out stays as stored. `ports`: whether the
    definition has ports (a task has none)."""
    config: ImageConfig = resolved.config
    out = dict(given)
    image = dict(out["image"])
    image["digest"] = resolved.digest
    if not image.get("working_dir") and config.working_dir:
        image["working_dir"] = config.working_dir
    if not image.get("user") and config.user:
        image["user"] = config.user
    out["image"] = image
    out["stack"] = IMAGE_STACK
    if not out.get("command") and (whole or "command" in out):
        command = [*config.entrypoint, *config.cmd]
        if not command:
            raise refusal("command", NO_COMMAND, out.get("command", []))
        out["command"] = command
    if config.env and (whole or "env" in out):
        out["env"] = {**config.env, **(out.get("env") or {})}
    if ports and whole and "ports" not in out and config.exposed_ports:
        out["ports"] = [config.exposed_ports[0]]
    return out


def registry_problem(insecure: list[str], ca: Path | None) -> str | None:
    """What is wrong with the registry settings (one line naming the setting), None when sane."""
    for host in insecure:
        if not host or "/" in host or "://" in host or any(c.isspace() for c in host):
            return f"insecure_registry: expected HOST or HOST:PORT as image references name it, got {host!r}"
    if ca is not None:
        try:
            registry_tls_context(ca)
        except (OSError, ssl.SSLError) as exc:
            return f"registry_ca: cannot load {ca}: {exc}"
    return None


class ImagePinner:
    """The BBS's registry client (made on first use) and the pinning of request bodies."""

    def __init__(self, insecure: list[str], ca: Path | None, timeout: float) -> None:
        self.insecure, self.ca, self.timeout = list(insecure), ca, timeout
        self._client: RegistryClient | None = None

    def client(self) -> RegistryClient:
        """The registry client; raises common.tls.CertError (one line naming `registry_ca`) when the CA
        bundle cannot be loaded: the BBS makes it as it starts, so that is found then."""
        if self._client is None:
            try:
                self._client = RegistryClient(insecure=self.insecure, ca=self.ca, timeout=self.timeout)
            except (OSError, ssl.SSLError) as exc:
                raise CertError(f"registry_ca: cannot load {self.ca}: {exc}") from None
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def pin(self, given: dict[str, Any], *, whole: bool, ports: bool = True) -> dict[str, Any]:
        """`given` pinned when it names an image (fill_from_image); as it is otherwise, but for a PATCH that
        drops the image (`image: null`), which runs on the default stack again unless it names one."""
        if "image" not in given:
            return given
        image = given["image"]
        if image is None:
            if not whole and "stack" not in given:
                return {**given, "stack": DEFAULT_STACK}
            return given
        ref = image["ref"]
        credentials = image.get("credentials")
        pair = (credentials["username"], credentials["password"]) if credentials else None
        try:
            resolved = await self.client().resolve(ref, pair)
        except RegistryError as exc:
            # The reason names the registry and repository, never the credentials.
            log.info("image refused", extra={"data": {"ref": ref, "reason": str(exc)}})
            raise refusal("image", f"cannot pin {ref!r}: {exc}", {"ref": ref}) from None
        log.info("image pinned", extra={"data": {"ref": ref, "digest": resolved.digest}})
        return fill_from_image(given, resolved, whole=whole, ports=ports)

    async def pinned(self, body: Body) -> Body:
        """A whole definition (a POST's, a task's) with its image pinned (`pin`); as it is without one."""
        if getattr(body, "image", None) is None:
            return body
        pinned = await self.pin(body.model_dump(mode="json", exclude_unset=True), whole=True,
                                ports="ports" in type(body).model_fields)
        try:
            return type(body).model_validate(pinned)
        except ValidationError as exc:  # what the image's config filled in is refused: a 422 naming the field
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None
