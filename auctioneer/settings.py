"""The auctioneer's settings: `VENDUE_*` environment variables, overridden by `vendue auctioneer` flags."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from common.limits import RequestLimitOptions
from common.logging import LogFormat
from common.models import MAX_EXPLANATIONS
from common.tls import TLSOptions
from common.transport import Transport

DEFAULT_PORT = 8890
# 200: about 0.25 MB per auction report. At 1,000 the reports (1.3 MB each) cost the BBS about a sixth of
# its time in the 250,000-instance scale benchmark (33.0 s against 27.7 s with none); a push of a few
# instances is explained whole either way.
DEFAULT_EXPLANATIONS = 200


class AuctioneerSettings(TLSOptions, RequestLimitOptions, BaseSettings):
    """TLSOptions: `--tls-cert/--tls-key/--tls-ca` (VENDUE_TLS_*) and `--insecure` (VENDUE_INSECURE); see
    docs/security.md."""

    model_config = SettingsConfigDict(env_prefix="VENDUE_", extra="ignore")

    bbs_url: str = "http://127.0.0.1:8889"
    # How auction requests arrive and cells are reached; the cell list and failure reports stay HTTP.
    transport: Transport = "http"
    nats_url: str = "nats://127.0.0.1:4222"  # may carry credentials: nats://user:pass@host:port
    nats_token: str | None = None
    listen: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    strategy: str = "diego"
    engine: str = "fast"
    # Diego's default is 10 s; the design lowers it to 5 s. The whole state fetch ends by this deadline.
    cell_state_timeout: float = Field(default=5.0, gt=0, le=300)
    work_timeout: float = Field(default=10.0, gt=0, le=300)
    bbs_timeout: float = Field(default=5.0, gt=0, le=300)
    # How many times a rep may reject (or fail to receive) an item before it is reported as a failure.
    max_attempts: int = Field(default=3, ge=1, le=100)
    max_inflight_starts: int = Field(default=0, ge=0)  # 0: no limit (Diego's default)
    # Concurrent requests to reps (and pooled connections): bounds sockets and memory at 1,000 cells.
    max_concurrency: int = Field(default=256, ge=1, le=10_000)
    # Batches with at least this many items are scheduled in a worker thread so the API keeps answering.
    thread_threshold: int = Field(default=500, ge=0)
    # Instances per auction whose placement is explained to the BBS (`vendue why`): the candidates scored,
    # or the failure's per-filter breakdown. Bounds the engine's added work and the report's size
    # (about 1 KB each); 0 turns explanations off.
    explanations: int = Field(default=DEFAULT_EXPLANATIONS, ge=0, le=MAX_EXPLANATIONS)
    auction_timeout: float = Field(default=60.0, gt=0)
    shutdown_timeout: float = Field(default=10.0, gt=0)
    # The "auctioneer" lease (docs/architecture.md: renewed every TTL/3; a standby takes over within one TTL).
    lease_ttl: float = Field(default=15.0, gt=0, le=3600)
    advertise_url: str | None = None  # where peers reach this auctioneer; default: the URL it listens on
    ready_file: Path | None = None
    log_level: str = "info"
    log_format: LogFormat | None = None  # common/logging.py: None picks by whether stderr is a terminal
