"""Which tests are `e2e` (they start real processes: a BBS, an auctioneer, a rep, nats-server, PostgreSQL, or
network namespaces) and which are `slow` (more than a few seconds), where their own module does not say so:
the root conftest.py marks them as they are collected, so that `pytest -m "not e2e and not slow"`, the fast
lane (tests/README.md), runs none of them.

Paths are relative to the repository's root; a test is named without its parameters (every variant).
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

import pytest

# Every test under these starts processes: clusters, components, nats-server, namespaces.
E2E_DIRECTORIES = ("tests/e2e", "tests/cluster", "tests/nats", "tests/bbs", "tests/rep", "tests/auctioneer")
# Every test of these modules starts processes of its own (inline, not through a fixture).
E2E_MODULES = (
    "common/transport/nats_server_test.py",
    "common/transport/nats_connection_test.py",
    "deploy/embedded_postgres_test.py",
)
# Tests that start one, where their modules' other tests do not.
E2E_TESTS = (
    "auctioneer/policy_test.py::test_a_real_auctioneer_serves_https_and_enforces_its_table",
    "auctioneer/policy_test.py::test_insecure_says_so_and_lets_anyone_in",
    "rep/fencing_test.py::test_stale_and_unknown_tokens_are_409_and_the_highest_survives_a_restart",
    "tests/deploy/compose_test.py::test_the_nats_configuration_admits_every_services_certificate_and_no_one_else",
)
# Fixtures that start processes: (the directory whose tests see it, its name), "" for the root conftest's.
E2E_FIXTURES = (
    ("", "postgres_url"),  # the session's PostgreSQL server
    ("", "fresh_postgres_database"),
    ("deploy", "bbs"),  # deploy/conftest.py: a `vendue bbs` process
)
# Parametrized fixtures whose variant starts processes: `database_url`'s postgres one asks for
# fresh_postgres_database only as it runs (request.getfixturevalue), out of sight of the fixture names.
E2E_PARAMS = (("database_url", "postgres"),)

# Tests that took more than about three seconds (setup, call and teardown; every variant together) on the
# 2-core machine with the fast lane's three workers.
SLOW_TESTS = (
    "auctioneer/app_test.py::test_without_a_lease_it_stands_by_auctions_nothing_and_is_not_ready",
    "auctioneer/leadership_test.py::test_a_leader_that_cannot_renew_steps_down_at_once_and_leads_again_with_its_token",
    "auctioneer/leadership_test.py::test_a_leader_that_stops_releases_the_lease_and_the_standby_leads_long_before_the_ttl",
    "bbs/converger_test.py::test_a_late_heartbeat_never_cuts_a_presence_short",
    "bbs/converger_test.py::test_only_the_lease_holder_converges",
    "bbs/lease_api_test.py::test_nobody_holds_a_lease_never_taken",
    "bbs/api_test.py::test_auctioneer_down_still_accepts_and_leaves_state_for_convergence",
    "common/serving_test.py::test_shutdown_does_not_wait_on_an_idle_tls_client",
    "deploy/cli_test.py::test_shell_completion_sees_every_command",
    "deploy/cli_test.py::test_help_lists_the_commands_in_their_groups_in_order",
    "deploy/cli_test.py::test_help_lists_every_command",
    "deploy/simulator/scenarios_test.py::test_scenarios_repeat_for_a_seed_and_round_trip_as_workload_files",
    "placement/rebalance_test.py::test_moves_within_a_crowded_zone_keep_every_constraint",
    "placement/rebalance_test.py::test_moves_keep_every_constraint_and_the_room",
    "placement/fast_equals_reference_test.py::test_fast_equals_reference",
    "rep/fencing_test.py::test_stale_and_unknown_tokens_are_409_and_the_highest_survives_a_restart",
    "rep/process_executor_test.py::test_running_only_once_the_child_listens_with_its_environment",
    "tests/engine/cross_engine_test.py::test_fast_and_reference_agree_for_every_strategy",
    "tests/engine/cross_engine_test.py::test_same_seed_same_answer",
    "placement/state_test.py::test_indexing_only_the_batchs_processes_answers_like_indexing_every_one",
    "placement/objective/fuzz_test.py::test_any_objective_text_in_an_auction_fails_only_its_own_lrp",
    "tests/security/test_hardened_input.py::test_a_hostile_cell_presence_is_422_naming_the_field",
    "tests/security/test_hardened_input.py::test_a_nul_in_any_field_that_reaches_the_store_is_422",
    "tests/security/test_hardened_input.py::test_a_hostile_desired_lrp_is_422_naming_the_field",
    "tests/security/test_hardened_input.py::test_a_callback_url_other_than_http_or_to_link_local_or_metadata_is_422",
    "tests/security/test_hardened_input.py::test_a_body_that_is_not_utf8_is_4xx_and_writes_nothing",
)


def within(path: str, directory: str) -> bool:
    return directory == "" or PurePosixPath(path).is_relative_to(directory)


def starts_processes(path: str, name: str, fixtures: list[str], params: dict[str, object]) -> bool:
    """Whether the test `name` (without parameters) of the module at `path` starts real processes, by its
    place, its fixtures (every one it uses, those of its fixtures included) and its parameters."""
    return (
        any(within(path, directory) for directory in E2E_DIRECTORIES)
        or path in E2E_MODULES
        or f"{path}::{name}" in E2E_TESTS
        or any(within(path, directory) and fixture in fixtures for directory, fixture in E2E_FIXTURES)
        or any(params.get(param) == value for param, value in E2E_PARAMS)
    )


def mark(item: pytest.Item) -> None:
    """Add e2e and slow to `item` as the tables above say (a mark its module already gave stays)."""
    path = item.path.relative_to(item.config.rootpath).as_posix()
    name = getattr(item, "originalname", None) or item.name
    callspec = getattr(item, "callspec", None)
    params = dict(callspec.params) if callspec is not None else {}
    fixtures = list(getattr(item, "fixturenames", ()))
    if starts_processes(path, name, fixtures, params):
        item.add_marker(pytest.mark.e2e)
    if f"{path}::{name}" in SLOW_TESTS:
        item.add_marker(pytest.mark.slow)


# --- keeping the marks honest -----------------------------------------------------------------------------

COMPONENTS = ("bbs", "auctioneer", "rep", "up", "demo")  # `vendue` commands that start servers
SERVER_PROGRAMS = ("nats-server", "postgres", "initdb", "pg_ctl", "docker-registry")


def real_process(argv: list[str]) -> bool:
    """Whether a process started with `argv` is one that makes a test e2e: a Vendue component (`vendue
    bbs`, ... through deploy.cli, not its --help or --check-config), nats-server, PostgreSQL, or a network
    namespace (`ip netns`)."""
    if not argv:
        return False
    program = PurePosixPath(argv[0]).name
    if program in SERVER_PROGRAMS or (program == "ip" and "netns" in argv):
        return True
    cli = [i for i, arg in enumerate(argv) if arg == "deploy.cli" or "from deploy.cli import" in arg]
    if not cli:
        return False
    rest = argv[cli[0] + 1:]
    command = next((arg for arg in rest if not arg.startswith("-")), None)
    return command in COMPONENTS and not {"--help", "--check-config"} & set(rest)


class ProcessWatch:
    """Notes every real process (`real_process`) that a test not marked e2e starts, through subprocess.Popen
    (asyncio's subprocesses included), while the test's setup, call or teardown runs."""

    def __init__(self, classify: Callable[[list[str]], bool] = real_process) -> None:
        self.classify = classify
        self.unmarked: pytest.Item | None = None  # the running test, when it is not marked e2e
        self.started: list[list[str]] = []
        self._popen_init: Any = None

    def install(self) -> None:
        watch, original = self, subprocess.Popen.__init__
        self._popen_init = original

        @functools.wraps(original)
        def init(popen: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
            if watch.unmarked is not None:
                argv = [str(args)] if isinstance(args, str | bytes | os.PathLike) else [str(a) for a in args]
                if watch.classify(argv):
                    watch.started.append(argv)
            original(popen, args, *rest, **options)

        subprocess.Popen.__init__ = init  # type: ignore[method-assign]

    def uninstall(self) -> None:
        if self._popen_init is not None:
            subprocess.Popen.__init__ = self._popen_init  # type: ignore[method-assign]

    def begin(self, item: pytest.Item) -> None:
        self.unmarked = None if item.get_closest_marker("e2e") else item
        self.started = []

    def end(self) -> list[list[str]]:
        """The real processes the test started, unmarked as it is (none for an e2e test)."""
        started, self.unmarked, self.started = self.started, None, []
        return started
