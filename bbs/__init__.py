"""The BBS: desired and actual LRPs, tasks, cell presence, convergence, events (`vendue bbs`).

Functional core (pure, tested without I/O):
  records.py          plain rows (DesiredRecord, ActualRecord, TaskRecord, CellRecord) and their wire forms
  actual_set.py       a working copy of actual LRP rows; `diff()` = what to write and which events to send
  lifecycle.py        the reps' batched reports (claimed/running/crashed/removed, task start/complete)
  restart_policy.py   Diego's crash restart policy
  app_history.py      each app's last events (placed, crashed, ...), kept per app for `vendue app`
  recent_past.py      the recent past nobody watched: stories merged, the cluster's rare events
  convergence.py      one convergence pass as a pure function; resize (scale) and evacuate decisions

Imperative shell (README.md has the map):
  store/              Store/Tx over SQLAlchemy 2 async Core (SQLite WAL default), a module per entity,
                      schema + Alembic migrations
  unit_of_work.py     a write transaction, its side effects after commit, the auctioneer-lease fence
  operations/         one module per resource, group-committed on the hot paths (desires, heartbeats,
                      lifecycle reports); convergence.py a pass: snapshot read, pure decisions,
                      revalidated bulk write, sends
  core.py             BBS: the unit of work and the operations composed
  (common/group_commit.py: requests arriving during a transaction share the next one)
  converger.py        the loop: timer, wake-ups, presence expiry and crash backoff deadlines, the lease
  outbound.py         auctioneer (coalesced, retried), rep stop/cancel/state, completion callbacks
  events.py           SSE broadcaster;  metrics.py  Prometheus
  api.py, routes/     FastAPI: one router per resource, mounted by create_app
  server.py           runtime wiring and uvicorn (ready file, graceful SIGTERM/SIGINT)
"""
