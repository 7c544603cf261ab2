"""The rep: one cell agent (or many simulated cells) that bids, takes work, runs it and reports it.

Modules, one concept each:
- settings.py          `VENDUE_*` settings (flags in deploy/rep_cmd.py override them)
- cell.py              one cell: reservations, what it holds, its bid (CellState), its detail (CellDetail)
                       and its presence
- outbox.py            a cell's lifecycle reports, flushed as ONE request per round, retried, never lost
- executor.py          the executor interface (start/stop LRPs, run/cancel tasks, callbacks)
- process_executor.py  real child processes (PORT, health checks, SIGTERM->SIGKILL, PDEATHSIG)
- isolation.py         how it isolates them (--isolation cgroups|none), their sandboxes and directories
- cgroups.py           one instance's cgroup: found (v1/v2), limited, emptied, removed
- app_users.py         one unprivileged uid per instance, machine-wide (a lock file)
- sim_executor.py      simulated containers: one heap and one loop for every cell of the process
- host.py              the process: cells, BBS client, heartbeats, evacuation and shutdown
- api.py               the HTTP API (GET /state, POST /work, stop, cancel, /evacuate, /ping)
- service.py           assembly and the uvicorn server (`--port 0`, `--ready-file`, signals)
"""
