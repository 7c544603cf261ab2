from bbs.restart_policy import RestartPolicy

POLICY = RestartPolicy()


def test_first_two_crashes_restart_at_once() -> None:
    assert POLICY.restart_at_once(1)
    assert POLICY.restart_at_once(2)
    assert not POLICY.restart_at_once(3)
    assert POLICY.should_restart(2, crashed_at=100.0, now=100.0)


def test_backoff_doubles_from_30s_to_16_minutes() -> None:
    assert [POLICY.backoff(n) for n in range(3, 10)] == [30, 60, 120, 240, 480, 960, 960]
    assert not POLICY.should_restart(3, crashed_at=100.0, now=129.9)
    assert POLICY.should_restart(3, crashed_at=100.0, now=130.0)


def test_no_restart_after_200_crashes() -> None:
    assert POLICY.backoff(200) == 960
    assert POLICY.backoff(201) is None
    assert not POLICY.should_restart(201, crashed_at=0.0, now=1e12)


def test_count_resets_after_five_minutes_running() -> None:
    assert POLICY.crash_count_after(7, was_running=True, running_since=0.0, now=300.0) == 1
    assert POLICY.crash_count_after(7, was_running=True, running_since=0.0, now=299.0) == 8
    assert POLICY.crash_count_after(7, was_running=False, running_since=0.0, now=1000.0) == 8
