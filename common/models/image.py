"""Images: an OCI image a desired LRP or task runs in, with the container executor (docs/containers.md).

`ref` is what the person gave (`registry.example:5000/team/web:1.4` or `...@sha256:<hex>`). The BBS pins it:
when the LRP is desired or updated it resolves a tag to the manifest's digest and stores it in `digest`, so
every instance runs that digest and a tag moved in the registry changes nothing until the definition does.
`credentials` are a private registry's: kept like env (sealed at rest), never in events, logs or answers to
readers. `working_dir` and `user` come from the image's config unless given; the image's entrypoint, cmd,
env and exposed port fill what the definition leaves out (the BBS does that when it pins the digest).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from .artifact import Digest
from .fields import Strict, _no_nul_or_none, no_nul

MAX_IMAGE_REF_CHARS = 1_024  # the distribution spec bounds a reference's name at 255; tag and host add to it

# The stack an image needs, Diego's "docker" rootfs provider: a cell whose executor runs images advertises it
# beside its own stacks, so the placement engine's stack filter sends image work only there.
IMAGE_STACK = "docker"


class ImageCredentials(Strict):
    username: Annotated[str, Field(min_length=1, max_length=256), AfterValidator(no_nul)]
    password: Annotated[str, Field(min_length=1, max_length=8_192), AfterValidator(no_nul)]


class Image(Strict):
    ref: Annotated[str, Field(min_length=1, max_length=MAX_IMAGE_REF_CHARS), AfterValidator(no_nul)]
    # The manifest's digest the instances run: set by the BBS, never trusted from a request.
    digest: Digest | None = None
    credentials: ImageCredentials | None = None
    working_dir: Annotated[str | None, Field(max_length=4_096), AfterValidator(_no_nul_or_none)] = None
    user: Annotated[str | None, Field(max_length=256), AfterValidator(_no_nul_or_none)] = None


def command_or_image(title: str, command: list[str], image: Image | None) -> None:
    """A definition needs a command, or an image whose config gives one (the BBS fills it when it pins the
    image, and refuses the definition, naming `command`, when the config has none). Raised as a validation
    error located at `command`, as a missing field's would be."""
    if command or image is not None:
        return
    raise ValidationError.from_exception_data(title, [InitErrorDetails(
        type=PydanticCustomError("missing_command", "a command is required (or an image whose config "
                                 "gives an entrypoint or cmd)"),
        loc=("command",), input=command)])
