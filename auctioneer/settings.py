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

    bbs_url: str = Field(default="http://127.0.0.1:8889",
                         description="The BBS; several comma-separated replicas fail over.")
    # How auction requests arrive and cells are reached; the cell list and failure reports stay HTTP.
    transport: Transport = Field(default="http",
                                 description="http or nats: how requests, bids and work travel.")
    nats_url: str = Field(default="nats://127.0.0.1:4222",  # may carry credentials: nats://user:pass@host:port
                          description="NATS server(s), credentials allowed; token: VENDUE_NATS_TOKEN.")
    nats_token: str | None = Field(default=None, json_schema_extra={"flag": None})  # a secret: env only
    listen: str = Field(default="127.0.0.1", description="Address to bind.")
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535, description="Port; 0 binds a free one.")
    strategy: str = Field(default="diego", description="Placement strategy.")
    engine: str = Field(default="fast", description="fast or reference.")
    # placement/scoring.py cache_locality: off by default, so that a cluster places as Diego does.
    cache_weight: float = Field(
        default=0.0, ge=0, le=1e6, allow_inf_nan=False, description="Beyond Diego: the diego strategy "
        "scores a cell whose host caches the app's source blob this much lower (lower wins; a whole unit is "
        "a cell fuller by all of its memory, disk and containers); 0 keeps Diego's scores.")
    # Diego's default is 10 s; the design lowers it to 5 s. The whole state fetch ends by this deadline.
    cell_state_timeout: float = Field(default=5.0, gt=0, le=300,
                                      description="Seconds to fetch every cell's state.")
    work_timeout: float = Field(default=10.0, gt=0, le=300, description="Seconds per work POST.")
    bbs_timeout: float = Field(default=5.0, gt=0, le=300, description="Seconds per call to the BBS.")
    # How many times a rep may reject (or fail to receive) an item before it is reported as a failure.
    max_attempts: int = Field(default=3, ge=1, le=100,
                              description="Tries before rejected work is a failure.")
    max_inflight_starts: int = Field(default=0, ge=0,  # 0: no limit (Diego's default)
                                     description="Starting-container limit, 0 for none.")
    # Concurrent requests to reps (and pooled connections): bounds sockets and memory at 1,000 cells.
    max_concurrency: int = Field(default=256, ge=1, le=10_000,
                                 description="Concurrent requests to reps (and pooled connections).")
    # Batches with at least this many items are scheduled in a worker thread so the API keeps answering.
    thread_threshold: int = Field(default=500, ge=0, description="Batches with at least this many items "
                                  "are scheduled in a worker thread.")
    # Instances per auction whose placement is explained to the BBS (`vendue why`): the candidates scored,
    # or the failure's per-filter breakdown. Bounds the engine's added work and the report's size
    # (about 1 KB each); 0 turns explanations off.
    explanations: int = Field(
        default=DEFAULT_EXPLANATIONS, ge=0, le=MAX_EXPLANATIONS,
        description="Instances per auction whose placement is explained to the BBS for `vendue why` "
        "(candidates and scores, or the per-filter breakdown; about 1 KB each), 0 for none.")
    auction_timeout: float = Field(default=60.0, gt=0, description="Seconds a whole auction may take.")
    shutdown_timeout: float = Field(default=10.0, gt=0,
                                    description="Seconds to finish what is under way when stopped.")
    # The "auctioneer" lease (docs/architecture.md: renewed every TTL/3; a standby takes over within one TTL).
    lease_ttl: float = Field(default=15.0, gt=0, le=3600, description="Seconds the elected auctioneer's "
                             "lease lasts; renewed every TTL/3.")
    advertise_url: str | None = Field(default=None, description="Where the other auctioneers and the BBS "
                                      "reach this one while it leads (default: the URL it listens on).")
    ready_file: Path | None = Field(default=None,
                                    description='Once serving, write {"url": ..., "pid": ...} here.')
    log_level: str = Field(default="info", description="debug, info, warning, error.")
    log_format: LogFormat | None = Field(  # common/logging.py: None picks by whether stderr is a terminal
        default=None, description="json (one object per line) or console (for a terminal) (default: console "
        "on a terminal, else json).")
