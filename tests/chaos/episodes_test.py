from __future__ import annotations

from .episodes import Episodes


def test_an_episode_lasts_from_its_first_to_its_last_observation() -> None:
    episodes = Episodes("real_duplicate")
    episodes.update(10.0, {("a", 0): "two"}, due=lambda key: False)
    episodes.update(11.0, {("a", 0): "two", ("b", 1): "two"}, due=lambda key: False)
    episodes.update(12.5, {("a", 0): "two"}, due=lambda key: False)
    episodes.update(13.0, {}, due=lambda key: False)
    summary = episodes.summary(started=10.0)
    assert summary["count"] == 2 and summary["longest_s"] == 2.5
    assert summary["unhealed"] == {"count": 0, "longest_s": 0.0, "examples": []}


def test_an_episode_seen_when_it_had_to_be_over_is_unhealed() -> None:
    episodes = Episodes("bbs_duplicate")
    settled = {"now": False}
    episodes.update(0.0, {("a", 0): "during the fault"}, due=lambda key: settled["now"])
    settled["now"] = True
    episodes.update(9.0, {("a", 0): "after the deadline"}, due=lambda key: settled["now"])
    episodes.update(9.5, {("a", 0): "still"}, due=lambda key: settled["now"])
    episodes.close_all()
    [example] = episodes.summary(started=0.0)["unhealed"]["examples"]
    assert example == {"key": ["a", 0], "first_seen_s": 0.0, "unhealed_at_s": 9.0, "duration_s": 9.5,
                       "seen": "after the deadline"}
    assert not episodes.open


def test_due_is_asked_per_key() -> None:
    episodes = Episodes("undesired_process")
    episodes.update(1.0, {("recent", 0): "x", ("old", 0): "y"}, due=lambda key: key[0] == "old")
    assert [e.key for e in episodes.unhealed()] == [("old", 0)]
