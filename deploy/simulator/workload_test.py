"""Workload file validation: known fields checked, unknown ignored, one line naming the field."""

from __future__ import annotations

import json

import pytest

from .workload import WorkloadError, load_workload, loads_workload, parse_workload


def cell(**overrides) -> dict:
    return {"id": "cell-0", "zone": "z0", "memory_mb": 1024, "disk_mb": 2048, "containers": 10, **overrides}


def lrp(**overrides) -> dict:
    return {"process_guid": "web", "index": 0, "memory_mb": 256, "disk_mb": 512, **overrides}


def error_of(data) -> str:
    with pytest.raises(WorkloadError) as info:
        parse_workload(data)
    return str(info.value)


def test_contract_example_parses_with_defaults() -> None:
    workload = parse_workload({
        "name": "example",
        "cells": [cell(prefill=[{"process_guid": "old-app", "index": 0, "memory_mb": 512, "disk_mb": 1024}])],
        "lrps": [lrp()],
        "tasks": [{"task_guid": "migrate", "memory_mb": 128, "disk_mb": 256}],
    })
    c = workload.cells[0]
    assert c.stack == "cflinuxfs4" and c.all_stacks == ("cflinuxfs4",)
    assert c.placement_tags == [] and c.labels == {} and c.host is None
    assert (c.prefill_memory_mb, c.prefill_disk_mb, c.prefill_containers) == (512, 1024, 1)
    assert workload.lrps[0].stack == "cflinuxfs4" and workload.lrps[0].strategy is None
    assert workload.lrps[0].on_cell_loss == "reschedule"  # a file without the field keeps Diego's policy
    assert workload.tasks[0].task_guid == "migrate"
    assert workload.now is None and workload.config.max_inflight_starts == 0


def test_tasks_and_lrps_may_be_absent() -> None:
    workload = parse_workload({"cells": [cell()]})
    assert workload.lrps == [] and workload.tasks == [] and workload.name == ""


def test_unknown_fields_are_ignored_everywhere() -> None:
    workload = parse_workload({
        "generator": "someone else's", "cells": [cell(rack="r1")], "lrps": [lrp(owner="team-a")],
    })
    assert workload.cells[0].id == "cell-0"
    assert not hasattr(workload.cells[0], "rack")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"cells": [cell()], "lrps": [lrp(), lrp(index=1), lrp(index=2), lrp(index=3, memory_mb=0)]},
         "lrps[3].memory_mb: must be >= 1"),
        ({"cells": [cell()], "lrps": [lrp(disk_mb=1_048_577)]}, "lrps[0].disk_mb: must be <= 1048576"),
        ({"cells": [cell()], "lrps": [lrp(memory_mb="256")]}, "lrps[0].memory_mb: must be an integer"),
        ({"cells": [cell()], "lrps": [lrp(memory_mb=True)]}, "lrps[0].memory_mb: must be an integer"),
        ({"cells": [cell()], "lrps": [lrp(process_guid="")]}, "lrps[0].process_guid: must not be empty"),
        ({"cells": [cell()], "lrps": [lrp(index=-1)]}, "lrps[0].index: must be >= 0"),
        ({"cells": [cell()], "lrps": [lrp(on_cell_loss="never")]},
         "lrps[0].on_cell_loss: Input should be 'reschedule' or 'keep-replicas'"),
        ({"cells": [cell()], "lrps": [{"process_guid": "web", "memory_mb": 1, "disk_mb": 1}]},
         "lrps[0].index: required"),
        ({"cells": [cell(memory_mb=0)]}, "cells[0].memory_mb: must be >= 1"),
        ({"cells": [cell(id="")]}, "cells[0].id: must not be empty"),
        ({"cells": [{"id": "c", "memory_mb": 1, "disk_mb": 1, "containers": 1}]}, "cells[0].zone: required"),
        ({"cells": [cell(), cell()]}, "cells[1].id: duplicate cell id 'cell-0' (first at cells[0])"),
        ({"cells": [cell(placement_tags="a")]}, "cells[0].placement_tags: must be a list"),
        ({"cells": [cell(labels={"tier": 1})]}, "cells[0].labels.tier: must be a string"),
        ({"cells": [cell(host={"cores": 0})]}, "cells[0].host.cores: must be >= 1"),
        ({"cells": [cell(devices={"gpu": -1})]}, "cells[0].devices.gpu: must be >= 0"),
        ({"cells": [cell(prefill=[{"process_guid": "a", "memory_mb": 1025}])]},
         "cells[0].prefill: memory 1025 MB exceeds the cell's 1024 MB"),
        ({"cells": [cell(containers=1, prefill=[{"process_guid": "a"}, {"process_guid": "b", "index": 1}])]},
         "cells[0].prefill: containers 2 exceeds the cell's 1"),
        ({"cells": [cell()], "lrps": [lrp(), lrp()]}, "lrps[1]: duplicate instance web/0 (first at lrps[0])"),
        ({"tasks": [{"task_guid": "t", "memory_mb": 1, "disk_mb": 1}] * 2},
         "tasks[1].task_guid: duplicate task 't' (first at tasks[0])"),
        ({"cells": {}}, "cells: must be a list"),
        ([], "workload: must be a JSON object"),
    ],
)
def test_errors_name_the_field(data, message: str) -> None:
    assert error_of(data) == message


def test_every_error_is_one_line() -> None:
    assert "\n" not in error_of({"cells": [cell(volumes=[{"size_mb": "x"}])]})


def test_invalid_json_reports_line_and_column() -> None:
    with pytest.raises(WorkloadError, match=r"^invalid JSON at line 3 column 1: "):
        loads_workload('{"cells": [\n  {"id": "a"},\n]}')


def test_load_workload_from_file(tmp_path) -> None:
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"name": "from-file", "cells": [cell()], "lrps": [lrp()]}))
    assert load_workload(path).name == "from-file"


def test_missing_file_and_bad_json_name_the_file(tmp_path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(WorkloadError, match="nope.json: no such file"):
        load_workload(missing)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(WorkloadError, match=r"broken.json: invalid JSON at line 1 column 2"):
        load_workload(broken)


def test_service_and_dea_fields_are_read() -> None:
    workload = parse_workload({
        "now": 100.0,
        "cells": [cell(
            stacks=["cflinuxfs4", "windows"], volumes=[{"name": "v", "size_mb": 10, "labels": {"k": "v"}}],
            ingress_ips=["10.0.0.1"], devices={"gpu": 2}, advertised_at=90, expires_at=110.5,
            host={"load5": 1.5, "cores": 4, "swap_used_mb": 10}, cached_blobs=["blob"],
        )],
        "lrps": [lrp(volumes=[{"name": "v", "size_mb": 5}], devices=[{"kind": "gpu"}], ingress_ip=True,
                     affinity=[{"expression": "tier=web", "weight": -2}], labels_match="tier=web",
                     strategy="service", objective="diego-blog", previous_cell="cell-0", total_instances=3)],
    })
    c, w = workload.cells[0], workload.lrps[0]
    assert c.all_stacks == ("cflinuxfs4", "windows")
    assert c.advertised_at == 90 and c.expires_at == 110.5 and c.host.cores == 4
    assert w.devices[0].count == 1 and w.affinity[0].weight == -2 and w.ingress_ip is True
