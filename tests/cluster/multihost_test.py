"""The multi-host cluster itself: every component on its host, serving HTTPS on its host's address and
nothing on loopback, with a certificate naming that address; PostgreSQL killed and restarted on its host
keeps the BBS's data. Needs root and `ip` (skipped otherwise, saying why)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.conftest import expect, wait_for
from tests.support.reach import reaches

from .multihost import MultiHostCluster

pytestmark = [pytest.mark.timeout(120)]


def test_components_serve_tls_on_their_hosts_address_only(multihost: Callable[..., MultiHostCluster]) -> None:
    cluster = multihost(cells=2, separate_auctioneers=True)
    assert set(cluster.hosts) == {"control", "auctioneer-1", "auctioneer-2", "cell-0", "cell-1"}
    urls = {**cluster.control_plane(), **{cell: rep.url for cell, rep in cluster.reps.items()}}
    for component, url in urls.items():
        host = cluster.host(cluster.host_of(component))
        parts = urlsplit(url)
        assert (parts.scheme, parts.hostname) == ("https", host.address), f"{component} serves on {url}"
        assert parts.port is not None and not host.run(lambda port=parts.port: reaches("127.0.0.1", port)), (
            f"expected nothing of {component} on its host's loopback")
        # The admin's client checks the certificate against the address it dialled: it names the address.
        assert httpx.get(f"{url}/ping", verify=cluster.verify, timeout=5.0).status_code == 200, component
    presence = httpx.get(f"{cluster.bbs_url}/v1/cells", verify=cluster.verify, timeout=5.0).json()["items"]
    assert {cell["cell_id"]: cell["rep_url"] for cell in presence} == {
        cell_id: rep.url for cell_id, rep in cluster.reps.items()}
    assert sorted(cluster.host_pids("cell-0")) == [cluster.reps["cell-0"].proc.pid]


def test_postgres_killed_and_restarted_on_its_host_keeps_the_data(
    multihost: Callable[..., MultiHostCluster],
) -> None:
    cluster = multihost(cells=1)
    with cluster.http_client(base_url=cluster.bbs_url, timeout=5.0) as http:
        desired = {"process_guid": "kept", "instances": 0, "memory_mb": 64, "command": ["true"]}
        assert http.post("/v1/desired_lrps", json=desired).status_code == 201
        cluster.kill("postgres", signal.SIGKILL)
        wait_for(lambda: expect(http.get("/readyz").status_code == 503, http.get("/readyz").text), 20.0,
                 "the BBS not ready without its database")
        cluster.restart("postgres")
        wait_for(lambda: expect(http.get("/readyz").status_code == 200, http.get("/readyz").text), 30.0,
                 "the BBS ready again")
        assert [lrp["process_guid"] for lrp in http.get("/v1/desired_lrps").json()["items"]] == ["kept"]


def test_simulated_cells_run_one_host_per_rep_process(multihost: Callable[..., MultiHostCluster]) -> None:
    cluster = multihost(cells=4, zones=2, sim_cells_per_process=2)
    assert set(cluster.hosts) == {"control", "rep-0", "rep-1"}
    presence = httpx.get(f"{cluster.bbs_url}/v1/cells", verify=cluster.verify, timeout=5.0).json()["items"]
    assert sorted(cell["cell_id"] for cell in presence) == ["sim0-0", "sim0-1", "sim1-0", "sim1-1"]
    for cell in presence:
        host = cluster.host(cluster.host_of(cell["cell_id"]))
        assert urlsplit(cell["rep_url"]).hostname == host.address, (
            f"{cell['cell_id']} serves on {cell['rep_url']}"
        )
    assert cluster.host_of("sim1-0") == "rep-1"
