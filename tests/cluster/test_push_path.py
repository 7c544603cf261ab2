"""`vendue push --path` and `vendue task run --path` through the real CLI, on real network hosts
(tests/cluster/multihost.py; two BBS replicas on PostgreSQL, transport http, TLS on, two cells each on a host
of its own).

The app's code exists only in a local temporary directory: a small Python HTTP server. Pushed with `--path`,
it is packed, uploaded to the blob store, fetched by each cell's rep from the BBS and run from the
instance's directory; every instance answers HTTP from its host. A second push of the same directory
uploads nothing (the store holds the digest), and the store lists the blob as named by both apps, which a
delete is then refused for. A task with `--path` runs a script from the directory and succeeds. A program
that is not there fails naming it, as a task's failure and as an instance's crash reason.

Needs root and `ip` (skipped otherwise, saying why).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from common.procutil import app_python
from tests.e2e.conftest import BBS, BBS_ARGS, REP_ARGS, Unmet, brief, run_cli, running_ordinary, wait_for

from .multihost import MultiHostCluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

SERVER = r"""
import http.server, os
BODY = ("from --path " + os.environ["INSTANCE_INDEX"] + " " + open("VERSION").read().strip()).encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
"""
MIGRATE = "#!/bin/sh\necho \"migrated to $(cat VERSION)\"\n"
MISSING = "./not-shipped.sh"


def code_dir(root: Path) -> Path:
    """The app's code, and nothing else anywhere: a server, a task's script, a file both read, and what
    `.vendueignore` leaves out (a file the server would refuse to start without, were it shipped)."""
    root.mkdir()
    (root / "server.py").write_text(SERVER)
    (root / "migrate.sh").write_text(MIGRATE)
    (root / "migrate.sh").chmod(0o755)
    (root / "VERSION").write_text("v42\n")
    (root / "secrets.env").write_text("TOKEN=do-not-ship\n")
    (root / ".vendueignore").write_text("*.env\n")
    return root


def answers(address: str) -> str:
    return httpx.get(f"http://{address}/", timeout=3.0).text


def crash_reason(bbs: BBS, process_guid: str) -> str:
    reasons = {a.get("crash_reason") or "" for a in bbs.actuals(process_guid)} - {""}
    if not reasons:
        raise Unmet(f"no crash reason yet: {brief(bbs.actuals(process_guid))}")
    return reasons.pop()


def test_code_pushed_from_a_local_directory_runs_on_the_hosts_and_answers(
    multihost: Callable[..., MultiHostCluster], tmp_path: Path,
) -> None:
    cluster = multihost(cells=2, rep_args=REP_ARGS, bbs_args=BBS_ARGS)
    bbs = BBS(cluster.bbs_url, cluster.verify)
    source = code_dir(tmp_path / "app")

    def vendue(*args: str) -> tuple[int, str, str]:
        result = run_cli(cluster, *args, timeout=90.0)
        return result.code, result.stdout, result.stderr

    command = ("--", app_python(), "server.py")
    code, out, err = vendue("push", "web", "-i", "2", "-m", "64", "--port", "8080", "--path", str(source),
                            "--json", *command)
    assert code == 0, f"expected the push to succeed, saw exit {code}: {out}{err}"
    desired = json.loads(out)
    [artifact] = desired["artifacts"]
    digest = artifact["digest"]
    assert artifact["dest"] == "." and desired["source_blob"] == digest, desired
    assert f"uploaded {source}" in err and digest in err, f"expected the upload reported, saw {err!r}"

    def both_answer() -> dict[int, str]:
        running = running_ordinary(bbs.actuals("web"))
        if sorted(running) != [0, 1]:
            raise Unmet(brief(bbs.actuals("web")))
        return {index: answers(a["address"]) for index, a in running.items()}

    answered = wait_for(both_answer, 60.0, "both instances of web RUNNING and answering HTTP")
    assert answered == {0: "from --path 0 v42", 1: "from --path 1 v42"}, answered
    hosts = {a["cell_id"] for a in running_ordinary(bbs.actuals("web")).values()}
    assert hosts == {"cell-0", "cell-1"}, f"expected one instance per host, saw {hosts}"
    assert set(cluster.instance_processes("web")) == {"cell-0", "cell-1"}, "each runs on its own host"

    code, out, err = vendue("push", "web-2", "-m", "64", "--port", "8080", "--path", str(source), *command)
    assert code == 0, f"expected the second push to succeed, saw exit {code}: {out}{err}"
    assert "in the blob store already, not sent" in err and "uploaded" not in err, err
    code, out, err = vendue("blobs", "list", "--json")
    assert code == 0, err
    [blob] = json.loads(out)
    assert blob["digest"] == digest, blob
    assert blob["referenced_by"] == ["desired LRP web", "desired LRP web-2"], blob
    code, out, err = vendue("blobs", "delete", digest[: len("sha256:") + 12])
    assert code == 1 and "in use" in err and "desired LRP web" in err, (code, out, err)

    code, out, err = vendue("task", "run", "--name", "migrate", "-m", "64", "--path", str(source),
                            "--timeout", "60", "--", "./migrate.sh")
    assert code == 0, f"expected the task to succeed, saw exit {code}: {out}{err}"
    assert "task migrate succeeded" in out and "migrated to v42" in out, out
    assert "in the blob store already" in err, "the task's code is the same blob"

    code, out, err = vendue("task", "run", "--name", "missing", "-m", "64", "--path", str(source),
                            "--timeout", "60", "--", MISSING)
    assert code == 1, f"expected the task to fail, saw exit {code}: {out}{err}"
    named = f"failed to start: program '{MISSING}' not found in the instance's directory"
    assert named in out, f"expected {named!r}, saw {out!r}"

    code, out, err = vendue("push", "broken", "-m", "64", "--path", str(source), "--", MISSING)
    assert code == 0, err
    reason = wait_for(lambda: crash_reason(bbs, "broken"), 60.0, "broken's instance crashed")
    assert reason == named, f"expected the crash reason {named!r}, saw {reason!r}"

    # What .vendueignore names never left this machine: the instance's directory holds only the rest.
    code, out, err = vendue("task", "run", "--name", "listing", "-m", "64", "--path", str(source),
                            "--timeout", "60", "--", "/bin/ls", "-A")
    assert code == 0, f"{out}{err}"
    listed = set(out.splitlines()[1:])
    assert {"server.py", "migrate.sh", "VERSION"} <= listed and "secrets.env" not in listed, listed
    assert ".vendueignore" not in listed, listed
    bbs.close()
