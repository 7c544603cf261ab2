"""`vendue push --path`, `vendue blobs list|delete` against a real `vendue bbs` process (conftest.py's `bbs`:
TLS, no reps, nothing placed): the upload, the skipped second upload, the listing with who names each blob,
deletion by a prefix, refused while named, and a reader refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)


def test_push_path_uploads_once_and_blobs_lists_and_deletes(bbs, tmp_path: Path) -> None:
    code = tmp_path / "app"
    code.mkdir()
    (code / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (code / "run.sh").chmod(0o755)
    (code / ".vendueignore").write_text("*.tmp\n")
    (code / "scratch.tmp").write_text("left out\n")

    first = bbs.vendue("push", "blobs-a", "--path", str(code), "--json", "--", "./run.sh")
    assert first.exit_code == 0, first.output
    [artifact] = json.loads(first.stdout)["artifacts"]
    digest = artifact["digest"]
    assert first.stderr.startswith(f"uploaded {code} (1 file(s), ") and digest in first.stderr, "only run.sh"
    stored = bbs.http.get(f"/v1/blobs/{digest}")
    assert stored.status_code == 200 and stored.headers["content-length"] == str(len(stored.content))

    second = bbs.vendue("task", "run", "--name", "blobs-t", "--detach", "--path", str(code), "--", "./run.sh")
    assert second.exit_code == 0, second.output
    assert "in the blob store already, not sent" in second.stderr, second.stderr
    assert bbs.http.get("/v1/tasks/blobs-t").json()["artifacts"] == [artifact]

    listed = bbs.vendue("blobs", "list", "--json")
    assert listed.exit_code == 0, listed.output
    mine = [b for b in json.loads(listed.stdout) if b["digest"] == digest]
    assert [b["referenced_by"] for b in mine] == [["desired LRP blobs-a", "task blobs-t"]], mine
    table = bbs.vendue("blobs", "list")
    assert digest[:19] in table.stdout and "desired LRP blobs-a" in table.stdout, table.stdout

    prefix = digest[: len("sha256:") + 12]
    refused = bbs.vendue("blobs", "delete", prefix)
    assert refused.exit_code == 1 and "in use" in refused.stderr, refused.output
    assert "desired LRP blobs-a" in refused.stderr, refused.stderr
    reader = bbs.vendue("blobs", "delete", digest, env=bbs.tls_env("viewer"))
    assert reader.exit_code == 1 and "403" in reader.stderr, reader.output

    assert bbs.http.delete("/v1/desired_lrps/blobs-a").status_code == 204
    assert bbs.http.post("/v1/tasks/blobs-t/cancel").status_code == 200
    assert bbs.http.delete("/v1/tasks/blobs-t").status_code == 204
    deleted = bbs.vendue("blobs", "delete", prefix, "--json")
    assert deleted.exit_code == 0, f"expected nothing to name the blob any more: {deleted.output}"
    assert json.loads(deleted.stdout) == {"digest": digest, "deleted": True}
    assert bbs.http.head(f"/v1/blobs/{digest}").status_code == 404
    gone = bbs.vendue("blobs", "delete", digest)
    assert gone.exit_code == 1 and gone.stderr.startswith(f"error: no blob {digest}"), gone.output
