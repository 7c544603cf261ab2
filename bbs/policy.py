"""The BBS's authorization table (docs/security.md, "BBS"), and the checks only a handler can make.

Every route of bbs/api.py has exactly one row here (policy_test.py checks it); a route without one is
refused for everyone. Roles: people and scripts are admin or reader (a certificate or a bearer token);
components are bbs, auctioneer and rep (certificates only).
"""

from __future__ import annotations

from fastapi import HTTPException, Request

from common.auth import READ_ROLES, Policy, identity_of, public, rule

from .records import AUCTIONEER_LEASE

# Whoever places or converges reads the BBS's state: people, the auctioneer, other BBS replicas.
STATE_READERS = (*READ_ROLES, "auctioneer", "bbs")
LEASE_RULE = "a lease is held only by the role it belongs to: the auctioneer, and only the lease 'auctioneer'"

POLICY = Policy({
    ("GET", "/ping"): public(),
    ("GET", "/livez"): public(),
    ("GET", "/readyz"): public(),
    ("GET", "/metrics"): rule(*READ_ROLES),
    ("GET", "/openapi.json"): rule(*READ_ROLES),
    ("GET", "/docs"): rule(*READ_ROLES),
    # desired LRPs and tasks: people write, everyone who places or watches reads
    ("POST", "/v1/desired_lrps"): rule("admin"),
    ("GET", "/v1/desired_lrps"): rule(*STATE_READERS),
    ("GET", "/v1/desired_lrps/{process_guid}"): rule(*STATE_READERS),
    ("PATCH", "/v1/desired_lrps/{process_guid}"): rule("admin"),
    ("DELETE", "/v1/desired_lrps/{process_guid}"): rule("admin"),
    # versions and rollouts (docs/rollouts.md): people change and restart apps, everyone who watches reads
    ("PUT", "/v1/desired_lrps/{process_guid}"): rule("admin"),
    ("GET", "/v1/desired_lrps/{process_guid}/rollout"): rule(*STATE_READERS),
    ("GET", "/v1/desired_lrps/{process_guid}/rollouts"): rule(*STATE_READERS),
    ("GET", "/v1/desired_lrps/{process_guid}/versions"): rule(*STATE_READERS),
    ("POST", "/v1/desired_lrps/{process_guid}/rollout/pause"): rule("admin"),
    ("POST", "/v1/desired_lrps/{process_guid}/rollout/resume"): rule("admin"),
    ("POST", "/v1/desired_lrps/{process_guid}/rollout/undo"): rule("admin"),
    ("POST", "/v1/desired_lrps/{process_guid}/restart"): rule("admin"),
    ("POST", "/v1/desired_lrps/{process_guid}/instances/{index}/restart"): rule("admin"),
    # an app's last events, kept per app (bbs/app_history.py): what `vendue app` and the dashboard show
    ("GET", "/v1/desired_lrps/{process_guid}/events"): rule(*READ_ROLES),
    ("GET", "/v1/actual_lrps"): rule(*STATE_READERS),
    ("GET", "/v1/actual_lrps/summary"): rule(*STATE_READERS),
    ("GET", "/v1/usage"): rule(*STATE_READERS),
    ("GET", "/v1/actual_lrps/{process_guid}/{index}/placement"): rule(*STATE_READERS),
    ("POST", "/v1/tasks"): rule("admin"),
    ("GET", "/v1/tasks"): rule(*STATE_READERS),
    ("GET", "/v1/tasks/{task_guid}"): rule(*STATE_READERS),
    ("POST", "/v1/tasks/{task_guid}/cancel"): rule("admin"),
    ("DELETE", "/v1/tasks/{task_guid}"): rule("admin"),
    # instances' and tasks' output: whatever an app printed, its secrets too (docs/security.md)
    ("GET", "/v1/logs/{process_guid}"): rule("admin", why="logs can hold an app's secrets"),
    ("GET", "/v1/tasks/{task_guid}/logs"): rule("admin", why="logs can hold a task's secrets"),
    # a WebSocket (docs/exec.md): a command run as the app, with its environment and its secrets
    ("GET", "/v1/desired_lrps/{process_guid}/instances/{index}/exec"): rule(
        "admin", why="a command in an instance runs as the app, with its secrets"),
    # the reps' reports: each only for the cells in its certificate (require_cells in the handler)
    ("PUT", "/v1/cells"): rule("rep", why="a rep reports for the cells in its certificate"),
    ("POST", "/v1/lifecycle"): rule("rep", why="a rep reports for the cells in its certificate"),
    ("GET", "/v1/cells"): rule(*STATE_READERS),
    ("DELETE", "/v1/cells/{cell_id}"): rule("admin", why="a person declares a cell gone for good"),
    ("POST", "/v1/cells/{cell_id}/cordon"): rule("admin", why="a person cordons a cell"),
    ("POST", "/v1/cells/{cell_id}/uncordon"): rule("admin", why="a person uncordons a cell"),
    ("POST", "/v1/cells/{cell_id}/drain"): rule("admin", why="a person drains a cell"),
    ("POST", "/v1/rebalance"): rule("admin", why="a person moves running instances"),
    ("GET", "/v1/rebalance"): rule(*STATE_READERS),
    # the auctioneer: its failures (fenced by its lease's token), its election
    ("POST", "/v1/placement_failures"): rule("auctioneer",
                                             why="the auctioneer reports what it could not place"),
    ("POST", "/v1/auctions"): rule("auctioneer", why="the auctioneer reports how each auction went"),
    ("POST", "/v1/leases/{name}"): rule("auctioneer", why=LEASE_RULE),
    ("DELETE", "/v1/leases/{name}"): rule("auctioneer", why=LEASE_RULE),
    ("GET", "/v1/leases/{name}"): rule(*STATE_READERS, "rep"),
    ("GET", "/v1/events"): rule(*READ_ROLES),
    ("GET", "/v1/events/recent"): rule(*READ_ROLES),
    # the dashboard (bbs/dashboard.py): people look; its login link checks its token itself
    ("GET", "/ui"): rule(*READ_ROLES),
    ("GET", "/ui/login"): public(),
    # bearer tokens: people manage them; components ask who one stands for
    ("POST", "/v1/tokens"): rule("admin"),
    ("GET", "/v1/tokens"): rule("admin"),
    ("DELETE", "/v1/tokens/{token_id}"): rule("admin"),
    ("POST", "/v1/tokens/verify"): rule("bbs", "auctioneer", "rep",
                                        why="components check the tokens callers bring"),
    # the blob store (docs/artifacts.md): people upload and remove an app's code; reps fetch it to run it
    ("PUT", "/v1/blobs/{digest}"): rule("admin", why="a person uploads an app's code"),
    ("GET", "/v1/blobs"): rule("admin"),
    ("GET", "/v1/blobs/{digest}"): rule("admin", "rep", why="a rep fetches the code of what it runs"),
    ("HEAD", "/v1/blobs/{digest}"): rule("admin", "rep", why="a rep fetches the code of what it runs"),
    ("DELETE", "/v1/blobs/{digest}"): rule("admin"),
})


def require_lease_holder(request: Request, name: str) -> None:
    """403 for any lease but the auctioneer's. Who may hold that one, the row says (the auctioneer role
    alone); the convergence lease is the BBS's own and never goes through the API. With authorization off
    (--insecure) anyone may, as with everything else."""
    identity = identity_of(request)
    if name != AUCTIONEER_LEASE and (identity is None or identity.via != "insecure"):
        raise HTTPException(status_code=403, detail=f"no caller may hold the lease {name!r}: {LEASE_RULE}")
