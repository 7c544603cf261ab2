"""The latency of listing 10,000 desired LRPs through Diego's API (bbs/diego, docs/diego-api.md) against
Vendue's own list: a real `vendue bbs --diego-listen` (HTTPS, tests/support/bbs_process.py) on loopback,
10,000 LRPs desired through the Diego API as Cloud Controller would (routes, log guid, annotation, a run
action with env), with no auctioneer (their instances stay UNCLAIMED: the lists do not depend on them).

    python tests/bench/diego_api.py [--lrps 10000] [--repeat 5]

Prints ONE JSON object, the median and best seconds of each (never asserts on time):
- `cfdot_desired_lrps`: `cfdot desired-lrps`, the real CLI (../shared/tools/cfdot; skipped when absent):
  its process, the protobuf call, decoding and printing 10,000 JSON lines;
- `protobuf_list_r3`: the project's protobuf client, POST /v1/desired_lrps/list.r3, answer decoded;
- `vendue_get_list`: Vendue's own GET /v1/desired_lrps, its JSON decoded;
and the answers' sizes in bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bbs.diego.codec import PROTOBUF  # noqa: E402
from bbs.diego.pb import diego_pb2 as pb  # noqa: E402
from common.tls import TLSFiles, client_context, issue  # noqa: E402
from tests.support.bbs_process import BBSProcess, certificates  # noqa: E402
from tests.support.diego import CFDOT  # noqa: E402

CONCURRENCY = 32


def desired(n: int) -> pb.DesiredLRP:
    guid = f"{uuid.uuid4()}-{uuid.uuid4()}"
    lrp = pb.DesiredLRP(process_guid=guid, domain="cf-apps", root_fs="preloaded:cflinuxfs4", instances=1,
                        memory_mb=64, disk_mb=64, ports=[8080], log_guid=guid[:36], annotation=f"etag-{n}")
    run = lrp.action.run_action
    run.path, run.user = "/tmp/lifecycle/launcher", "vcap"
    run.args.extend(["app", "bundle exec rackup -p $PORT", ""])
    run.env.add(name="VCAP_APPLICATION", value=json.dumps({"application_name": f"app-{n}"}))
    lrp.routes.routes["cf-router"] = b'[{"hostnames":["app-%d.example.com"],"port":8080}]' % n
    return lrp


async def desire_all(url: str, verify: Any, count: int) -> None:
    async with httpx.AsyncClient(base_url=url, verify=verify, timeout=60.0,
                                 limits=httpx.Limits(max_connections=CONCURRENCY)) as client:
        queue = list(range(count))

        async def worker() -> None:
            while queue:
                n = queue.pop()
                body = pb.DesireLRPRequest(desired_lrp=desired(n)).SerializeToString()
                answer = await client.post("/v1/desired_lrp/desire.r2", content=body,
                                           headers={"Content-Type": PROTOBUF})
                result = pb.DesiredLRPLifecycleResponse.FromString(answer.content)
                if answer.status_code != 200 or result.HasField("error"):
                    raise SystemExit(f"desire {n}: {answer.status_code} {result.error}")

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


def timed(repeat: int, run: Callable[[], int]) -> dict[str, Any]:
    seconds, size = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        size = run()
        seconds.append(time.perf_counter() - started)
    return {"median_s": round(statistics.median(seconds), 4), "best_s": round(min(seconds), 4), "bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lrps", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vendue-bench-diego-") as tmp:
        data = Path(tmp)
        certs = certificates(data)
        issue(certs, role="cf", name="cf")
        cf = TLSFiles.in_dir(certs, "cf")
        room = str(args.lrps + 10)
        bbs = BBSProcess(data, "diego-bench", None, "--diego-listen", "127.0.0.1:0", "--max-lrps", room,
                         "--max-instances", room, certs=certs)
        try:
            verify = client_context(cf)
            started = time.perf_counter()
            asyncio.run(desire_all(bbs.diego_url, verify, args.lrps))
            result: dict[str, Any] = {"lrps": args.lrps,
                                      "desire_all_s": round(time.perf_counter() - started, 2)}
            with httpx.Client(base_url=bbs.diego_url, verify=verify, timeout=120.0) as diego, \
                    httpx.Client(base_url=bbs.url, verify=bbs.verify, timeout=120.0) as vendue:

                def protobuf() -> int:
                    answer = diego.post("/v1/desired_lrps/list.r3", content=b"",
                                        headers={"Content-Type": PROTOBUF})
                    listed = pb.DesiredLRPsResponse.FromString(answer.content)
                    assert len(listed.desired_lrps) == args.lrps, len(listed.desired_lrps)
                    return len(answer.content)

                def own() -> int:
                    answer = vendue.get("/v1/desired_lrps")
                    assert len(answer.json()["items"]) == args.lrps
                    return len(answer.content)

                result["protobuf_list_r3"] = timed(args.repeat, protobuf)
                result["vendue_get_list"] = timed(args.repeat, own)
            if CFDOT.is_file():
                def cfdot() -> int:
                    done = subprocess.run(
                        [str(CFDOT), "--bbsURL", bbs.diego_url, "--caCertFile", str(cf.ca),
                         "--clientCertFile", str(cf.cert), "--clientKeyFile", str(cf.key), "--timeout", "120",
                         "desired-lrps"],
                        capture_output=True, check=True, timeout=180)
                    assert done.stdout.count(b"\n") == args.lrps
                    return len(done.stdout)

                result["cfdot_desired_lrps"] = timed(args.repeat, cfdot)
            else:
                result["cfdot_desired_lrps"] = f"skipped: no cfdot at {CFDOT}"
            vendue_s = result["vendue_get_list"]["median_s"]
            result["protobuf_over_vendue"] = round(result["protobuf_list_r3"]["median_s"] / vendue_s, 2)
        finally:
            bbs.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
