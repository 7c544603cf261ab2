"""The BBS's settings: `VENDUE_*` environment variables, overridden by `vendue bbs` flags.

Every timing of docs/architecture.md "Defaults" that the BBS applies is here, so tests can shrink them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
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

    listen: str = "127.0.0.1"
    port: int = Field(default=8889, ge=0, le=65535)
    data_dir: Path = Path(".vendue")
    database_url: str | None = None  # default: sqlite+aiosqlite:///<data_dir>/bbs.db
    # SQLite only: full (an acknowledged write survives a power loss) or normal (in WAL mode, only a crash
    # of the process; faster). See bbs/store/database.py SQLITE_SYNCHRONOUS.
    sqlite_synchronous: Literal["full", "normal"] = "full"
    auctioneer_url: str = "http://127.0.0.1:8890"
    # nats: auction requests, stops and cancels go over NATS, and every event is also published on
    # vendue.events.<type>; the reps' heartbeats and lifecycle reports stay HTTP (PUT /v1/cells,
    # POST /v1/lifecycle).
    transport: Transport = "http"
    nats_url: str = "nats://127.0.0.1:4222"  # may carry credentials: nats://user:pass@host:port
    nats_token: str | None = None
    ready_file: Path | None = None
    log_level: str = "info"
    log_format: LogFormat | None = None  # common/logging.py: None picks by whether stderr is a terminal
    # Encryption at rest of command and env (bbs/encryption.py): a key ring file (0600), or its JSON in
    # VENDUE_ENCRYPTION_KEYS; never a flag holding keys (argv is readable by every local user).
    encryption_keys_file: Path | None = None
    encryption_keys: SecretStr | None = None

    # HTTP calls made by the BBS (auctioneer, reps, completion callbacks).
    http_timeout: float = Field(default=5.0, gt=0)
    send_attempts: int = Field(default=3, ge=1)  # tries per auctioneer send before leaving it to convergence

    # Convergence and the restart policy (Diego's defaults in docs/architecture.md, all configurable).
    convergence_interval: float = Field(default=5.0, gt=0)
    presence_ttl: float = Field(default=10.0, gt=0)
    stale_unclaimed: float = Field(default=30.0, gt=0)
    kick_task: float = Field(default=30.0, gt=0)
    expire_pending_task: float = Field(default=1800.0, gt=0)
    expire_completed_task: float = Field(default=120.0, gt=0)
    task_retries: int = Field(default=3, ge=1)
    immediate_restarts: int = Field(default=3, ge=1)  # crashes 1..immediate_restarts-1 restart at once
    crash_backoff_min: float = Field(default=30.0, gt=0)
    crash_backoff_max: float = Field(default=960.0, gt=0)
    max_restarts: int = Field(default=200, ge=0)
    crash_reset_after: float = Field(default=300.0, gt=0)
    lease_ttl: float = Field(default=15.0, gt=0)
    forget_cell_after: float = Field(default=3600.0, gt=0)  # drop an expired cell's row after this
    # keep-replicas LRPs (bbs/cell_loss.py): after a cell's presence expired, wait this long, then check
    # it for up to cell_loss_check (its rep asked for the cell's state) before moving single-instance apps.
    cell_loss_grace: float = Field(default=30.0, ge=0)
    cell_loss_check: float = Field(default=5.0, gt=0)
    # Rebalancing (bbs/rebalancer.py): moves in flight (at most one per app), started per minute (0:
    # scaled with the cluster, bbs/rebalance_budget.py), how long a replacement has to run before its move
    # is abandoned, a cell's memory fraction allowed above the mean (for loadmark apps, ×100 points of
    # load mark), how much better (in units of its strategy's score) another cell must be for an instance
    # to move there (placement/rebalance/strategy_margin.py); rebalance_interval > 0 plans on its
    # own that often after a cell appeared or returned (0: on request).
    rebalance_in_flight: int = Field(default=5, ge=1)
    rebalance_moves_per_minute: int = Field(default=0, ge=0)  # 0: one per present cell, at least 60
    rebalance_move_timeout: float = Field(default=120.0, gt=0)
    rebalance_load_tolerance: float = Field(default=0.10, ge=0, le=1)
    rebalance_strategy_margin: float = Field(default=0.2, ge=0)
    rebalance_interval: float = Field(default=0.0, ge=0)

    def key_ring(self) -> KeyRing | None:
        """The key ring (None: encryption at rest off); raises encryption.KeyRingError, naming the setting."""
        given = self.encryption_keys.get_secret_value() if self.encryption_keys is not None else None
        return load_key_ring(self.encryption_keys_file, given)

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{(self.data_dir / 'bbs.db').resolve()}"
