"""The compact form of what a cell accepted: written by the auctioneer, matched by the BBS's pattern, read
back."""

from __future__ import annotations

import re

from common.accepted_work import LRPS_PATTERN, TASKS_PATTERN, lrps_of, lrps_text, tasks_of, tasks_text


def test_instances_and_tasks_round_trip_through_strings_the_patterns_accept() -> None:
    instances = [("web", 0), ("web", 12), ("a.b_c-d", 2_147_483_647)]
    text = lrps_text(instances)
    assert text == "web:0 web:12 a.b_c-d:2147483647"
    assert re.fullmatch(LRPS_PATTERN, text) and list(lrps_of(text)) == instances
    assert tasks_text(["t1", "job.2"]) == "t1 job.2" and tasks_of("t1 job.2") == ["t1", "job.2"]
    assert re.fullmatch(TASKS_PATTERN, "t1 job.2")
    assert lrps_text([]) == "" and list(lrps_of("")) == [] and tasks_of("") == []
    assert re.fullmatch(LRPS_PATTERN, "") and re.fullmatch(TASKS_PATTERN, "")


def test_the_patterns_refuse_what_is_not_a_list_of_guids() -> None:
    for bad in ("web", "web:", ":1", "web:1  api:2", " web:1", "web:1 ", "bad guid:1", "web:-1", "web:1\nx:2",
                "web:12345678901", "-web:1"):
        assert not re.fullmatch(LRPS_PATTERN, bad), bad
    for bad in ("t1  t2", " t1", "t/1", "t1\0"):
        assert not re.fullmatch(TASKS_PATTERN, bad), bad
