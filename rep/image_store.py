"""Images pulled from a registry and unpacked once per digest into the host's artifact cache.

`ensure(image)` gives the read-only root filesystem of `<registry>/<repository>@<digest>` (the digest the
BBS pinned), pulled at most once per host however many instances start at once: skopeo copies it over the
OCI distribution API into an OCI layout (verifying the manifest against the pinned digest and every blob
against its own), umoci unpacks the layers in order (whiteouts applied) into a tree that the cache
(rep/artifact_cache.py `ensure_tree`) indexes under the manifest's digest, pins for its instances and
evicts, least recently used first, with the other artifacts: one policy, one eviction.

Registry access: https with the system's trust store plus `--registry-ca`; plain http only for a registry
listed in `--insecure-registry HOST:PORT`. Credentials go to skopeo in an auth file of the rep's (0600,
removed after), never on a command line. A pull that fails says why in the instance's crash reason:
`image 127.0.0.1:5000/team/web@sha256:ab12…: not found in the registry`, `...: credentials refused`,
`...: digest mismatch`, `...: unreachable (...)`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from common.models.image import Image

from .artifact_cache import ArtifactCache, ArtifactError

log = logging.getLogger("rep.images")

PULL_TIMEOUT_S = 600.0
DOCKER_HUB = "docker.io"


def split_ref(ref: str) -> tuple[str, str]:
    """(registry host, repository) of an image reference, its tag or digest dropped; a reference with no
    registry part is Docker Hub's (`library/` for a single name), as docker reads it."""
    name = ref.split("@", 1)[0]
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = DOCKER_HUB, name if rest else f"library/{name}"
    last_slash = path.rfind("/")
    colon = path.rfind(":")
    if colon > last_slash:
        path = path[:colon]
    return host, path


def describe_image(image: Image) -> str:
    host, repo = split_ref(image.ref)
    digest = image.digest or "(no digest)"
    return f"image {host}/{repo}@{digest[:19]}…"


def _why(stderr: str) -> str:
    """skopeo's error, as the reason an instance crashed."""
    text = stderr.lower()
    if "manifest unknown" in text or "not found" in text or "name unknown" in text:
        return "not found in the registry"
    if "unauthorized" in text or "authentication required" in text or "denied" in text:
        return "credentials refused"
    if "digest" in text and ("match" in text or "mismatch" in text):
        return "digest mismatch"
    if "certificate" in text or "x509" in text or "tls" in text:
        return f"unreachable (TLS: {stderr.strip().splitlines()[-1][-200:]})"
    last = stderr.strip().splitlines()[-1] if stderr.strip() else "no output"
    return f"unreachable ({last[-200:]})"


class ImageStore:
    def __init__(self, cache: ArtifactCache, *, insecure_registries: tuple[str, ...] = (),
                 registry_ca: Path | None = None, skopeo: str = "skopeo", umoci: str = "umoci") -> None:
        self.cache = cache
        self.insecure = frozenset(insecure_registries)
        self.registry_ca = registry_ca
        self.skopeo, self.umoci = skopeo, umoci
        self.pulls = 0  # pulls begun, for tests and the benchmark

    async def ensure(self, instance: str, image: Image) -> Path:
        """The unpacked root filesystem of `image`, pinned for `instance` (the executor's release unpins).
        Raises ArtifactError naming the image and why."""
        name = describe_image(image)
        if image.digest is None:
            raise ArtifactError(f"{name}: no digest pinned")
        self.cache.pin(instance, [image.digest])
        return await self.cache.ensure_tree(image.digest, name, lambda work: self._pull(image, name, work))

    async def _pull(self, image: Image, name: str, work: Path) -> None:
        assert image.digest is not None
        self.pulls += 1
        began = time.monotonic()
        host, repo = split_ref(image.ref)
        layout = work / "layout"
        argv = [self.skopeo, "copy", "--quiet", "--retry-times", "2"]
        if host in self.insecure:
            argv.append("--src-tls-verify=false")
        elif self.registry_ca is not None:
            certs = work / "certs"
            certs.mkdir()
            shutil.copy(self.registry_ca, certs / "ca.crt")
            argv += ["--src-cert-dir", str(certs)]
        if image.credentials is not None:
            auth = work / "auth.json"
            token = base64.b64encode(
                f"{image.credentials.username}:{image.credentials.password}".encode()).decode()
            fd = os.open(auth, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump({"auths": {host: {"auth": token}}}, out)
            argv += ["--src-authfile", str(auth)]
        else:
            argv.append("--src-no-creds")
        argv += [f"docker://{host}/{repo}@{image.digest}", f"oci:{layout}:image"]
        await _run(argv, lambda err: f"{name}: {_why(err)}")
        await _run([self.umoci, "raw", "unpack", "--image", f"{layout}:image", str(work / "tree")],
                   lambda err: f"{name}: cannot unpack ({err.strip()[-200:]})")
        log.info("image pulled", extra={"data": {"image": f"{host}/{repo}", "digest": image.digest,
                                                 "seconds": round(time.monotonic() - began, 3)}})


async def _run(argv: list[str], why: Callable[[str], str]) -> None:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/root"})
    try:
        _, err = await asyncio.wait_for(proc.communicate(), PULL_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise ArtifactError(f"{argv[0]} timed out after {PULL_TIMEOUT_S:g}s") from None
    except asyncio.CancelledError:
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        raise ArtifactError(why(err.decode(errors="replace")))
