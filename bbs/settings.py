"""The BBS's settings: `VENDUE_*` environment variables, overridden by `vendue bbs` flags.

Every timing of docs/architecture.md "Defaults" that the BBS applies is here, so tests can shrink them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.limits import RequestLimitOptions
from common.logging import LogFormat
from common.tls import TLSOptions
from common.transport import Transport

from .encryption import KeyRing, load_key_ring
from .quotas import QuotaOptions


class BBSSettings(BaseSettings, TLSOptions, RequestLimitOptions, QuotaOptions):
    """TLSOptions: `--tls-cert/--tls-key/--tls-ca` (VENDUE_TLS_*) serve HTTPS and are presented on every
    call the BBS makes; `--insecure` (VENDUE_INSECURE) serves plain HTTP with authorization off."""

    model_config = SettingsConfigDict(env_prefix="VENDUE_", extra="ignore")

    listen: str = Field(default="127.0.0.1", description="Address to bind.")
    port: int = Field(default=8889, ge=0, le=65535, description="Port; 0 picks a free one.")
    # Diego's BBS API (protobuf over HTTPS, bbs/diego, docs/diego-api.md) on a listener of its own.
    diego_listen: str | None = Field(
        default=None, description="Serve Diego's BBS API (protobuf) on HOST:PORT (port 0 picks one); off "
        "unless set.")

    @field_validator("diego_listen")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("must be HOST:PORT (port 0 to 65535)")
        return value

    def diego_address(self) -> tuple[str, int] | None:
        """(host, port) of the Diego API's listener; None: not served."""
        if self.diego_listen is None:
            return None
        host, _, port = self.diego_listen.rpartition(":")
        return host.strip("[]"), int(port)
    data_dir: Path = Field(default=Path(".vendue"), description="Data folder.")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy async URL (default: sqlite+aiosqlite:///<data-dir>/bbs.db).")
    # SQLite only: full (an acknowledged write survives a power loss) or normal (in WAL mode, only a crash
    # of the process; faster). See bbs/store/database.py SQLITE_SYNCHRONOUS.
    sqlite_synchronous: Literal["full", "normal"] = Field(
        default="full", description="SQLite: full (an acknowledged write survives a power loss) or normal "
        "(only a crash of the BBS; faster).")
    auctioneer_url: str = Field(default="http://127.0.0.1:8890", description="Auctioneer base URL.")
    # nats: auction requests, stops and cancels go over NATS, and every event is also published on
    # vendue.events.<type>; the reps' heartbeats and lifecycle reports stay HTTP (PUT /v1/cells,
    # POST /v1/lifecycle).
    transport: Transport = Field(default="http",
                                 description="http or nats: auction requests, stops and cancels, events.")
    nats_url: str = Field(default="nats://127.0.0.1:4222",  # may carry credentials: nats://user:pass@host:port
                          description="NATS server(s), credentials allowed; token: VENDUE_NATS_TOKEN.")
    nats_token: str | None = Field(default=None, json_schema_extra={"flag": None})  # a secret: env only
    ready_file: Path | None = Field(default=None, description="Write {url, pid} here once serving.")
    log_level: str = Field(default="info", description="debug, info, warning, error.")
    log_format: LogFormat | None = Field(  # common/logging.py: None picks by whether stderr is a terminal
        default=None, description="json (one object per line) or console (for a terminal) (default: console "
        "on a terminal, else json).")
    # Encryption at rest of command and env (bbs/encryption.py): a key ring file (0600), or its JSON in
    # VENDUE_ENCRYPTION_KEYS; never a flag holding keys (argv is readable by every local user).
    encryption_keys_file: Path | None = Field(
        default=None, description="Key ring sealing command and env at rest, mode 0600 (or its JSON in "
        "VENDUE_ENCRYPTION_KEYS). Without one they are stored in the clear.")
    encryption_keys: SecretStr | None = Field(default=None, json_schema_extra={"flag": None})

    # HTTP calls made by the BBS (auctioneer, reps, completion callbacks).
    http_timeout: float = Field(default=5.0, gt=0, description="Seconds per outgoing HTTP call.")
    send_attempts: int = Field(default=3, ge=1, description="Tries per send to the auctioneer before leaving "
                               "the work to convergence.")
    # Completion callbacks go out with no client certificate and are verified against the system's trust
    # store, or only this bundle when given; the cluster CA only if it is the bundle given (bbs/outbound.py).
    callback_ca: Path | None = Field(default=None, description="CA bundle https completion callbacks are "
                                     "verified against (default: the system's trust store).")

    # Images (bbs/images.py): the registries desired LRPs and tasks name are asked over https, verified
    # against the system's trust store plus --registry-ca; plain http only for those listed insecure.
    insecure_registry: list[str] = Field(default_factory=list, description="A registry (HOST:PORT) asked "
                                         "over plain http, not https (repeatable).")
    registry_ca: Path | None = Field(default=None, description="CA bundle registries' certificates are "
                                     "verified against, besides the system's trust store.")
    registry_timeout: float = Field(default=10.0, gt=0, description="Seconds per call to an image registry.")

    # Convergence and the restart policy (Diego's defaults in docs/architecture.md, all configurable).
    convergence_interval: float = Field(default=5.0, gt=0, description="Seconds between convergence runs.")
    presence_ttl: float = Field(default=10.0, gt=0, description="Cell presence TTL, seconds.")
    stale_unclaimed: float = Field(default=30.0, gt=0,
                                   description="Re-auction an unclaimed instance after, s.")
    kick_task: float = Field(default=30.0, gt=0, description="Re-auction a pending task after, s.")
    expire_pending_task: float = Field(default=1800.0, gt=0,
                                       description="Fail a task still pending after, s.")
    expire_completed_task: float = Field(default=120.0, gt=0,
                                         description="Forget a completed task with a completion callback "
                                                     "that never got through after, s.")
    task_retention: float = Field(default=86400.0, gt=0,
                                  description="Keep a completed task without a callback (its result and the "
                                              "last part of its output) for, s.")
    max_completed_tasks: int = Field(default=10_000, ge=1,
                                     description="At most this many completed tasks kept (the oldest go).")
    task_retries: int = Field(default=3, ge=1, description="Placement rejections before a task fails.")
    immediate_restarts: int = Field(default=3, ge=1, description="Crash counts below this restart at once.")
    crash_backoff_min: float = Field(default=30.0, gt=0, description="First crash backoff, s.")
    crash_backoff_max: float = Field(default=960.0, gt=0, description="Longest crash backoff, s.")
    max_restarts: int = Field(default=200, ge=0, description="No restart after this many crashes.")
    crash_reset_after: float = Field(default=300.0, gt=0,
                                     description="Running this long resets the crash count, s.")
    lease_ttl: float = Field(default=15.0, gt=0, description="Convergence lease TTL, s.")
    forget_cell_after: float = Field(default=3600.0, gt=0,
                                     description="Drop an expired cell's row after, s.")
    # keep-replicas LRPs (bbs/cell_loss.py): after a cell's presence expired, wait this long, then check
    # it for up to cell_loss_check (its rep asked for the cell's state) before moving single-instance apps.
    cell_loss_grace: float = Field(default=30.0, ge=0, description="keep-replicas LRPs: wait this long "
                                   "after a cell's presence expired before its check, s.")
    cell_loss_check: float = Field(default=5.0, gt=0, description="How long the check (and a late claim's) "
                                   "waits for the cell's rep to answer, s.")
    # Rebalancing (bbs/rebalancer.py): moves in flight (at most one per app), started per minute (0:
    # scaled with the cluster, bbs/rebalance_budget.py), how long a replacement has to run before its move
    # is abandoned, a cell's memory fraction allowed above the mean (for loadmark apps, ×100 points of
    # load mark), how much better (in units of its strategy's score) another cell must be for an instance
    # to move there (placement/rebalance/strategy_margin.py); rebalance_interval > 0 plans on its
    # own that often after a cell appeared or returned (0: on request).
    rebalance_in_flight: int = Field(default=5, ge=1,
                                     description="Rebalancing moves in flight at most, one per app.")
    rebalance_moves_per_minute: int = Field(default=0, ge=0, description="Rebalancing moves started per "
                                            "minute at most; 0: one per present cell, at least 60.")
    rebalance_move_timeout: float = Field(default=120.0, gt=0, description="A move whose replacement does "
                                          "not run by then is abandoned, s.")
    rebalance_load_tolerance: float = Field(default=0.10, ge=0, le=1, description="Memory fraction a "
                                            "cell may be above the mean; loadmark apps: ×100 load-mark "
                                            "points.")
    rebalance_strategy_margin: float = Field(default=0.2, ge=0, description="Move an instance when another "
                                             "cell beats its own by this much of its strategy's score.")
    # The auctioneer's --cache-weight: the planner scores diego apps as the auction does (set both alike).
    cache_weight: float = Field(default=0.0, ge=0, le=1e6, allow_inf_nan=False, description="The "
                                "auctioneer's --cache-weight, for the rebalance planner's diego scores.")
    rebalance_interval: float = Field(default=0.0, ge=0, description="Look this often for a cell that "
                                      "appeared or returned, then plan and carry out rebalancing moves until "
                                      "a plan finds nothing (at most 4 plans), s; 0: off.")
    # The blob store (bbs/store/blobs.py, docs/artifacts.md).
    blob_max_bytes: int = Field(default=2 * 1024**3, ge=1, description="Largest blob PUT /v1/blobs takes, "
                                "bytes (413 past it).")
    blob_gc_grace: float = Field(default=3600.0, ge=0, description="Remove a blob no desired LRP or task has "
                                 "named for this long, s.")
    blob_gc_interval: float = Field(default=60.0, gt=0, description="Seconds between blob garbage "
                                    "collections (on the replica holding the convergence lease).")

    def key_ring(self) -> KeyRing | None:
        """The key ring (None: encryption at rest off); raises encryption.KeyRingError, naming the setting."""
        given = self.encryption_keys.get_secret_value() if self.encryption_keys is not None else None
        return load_key_ring(self.encryption_keys_file, given)

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{(self.data_dir / 'bbs.db').resolve()}"
