"""The rep's authorization table (docs/security.md, "Rep"): one row per route of rep/api.py.

Work comes only from the auctioneer (and only under the lease's current fencing token: rep/fencing.py);
stops and cancels only from the BBS, and instances' logs only to it; evacuating cells is a person's
decision. policy_test.py checks every route has a row.
"""

from __future__ import annotations

from common.auth import READ_ROLES, Policy, public, rule

READ = rule("auctioneer", "bbs", *READ_ROLES)

POLICY = Policy({
    ("GET", "/ping"): public(),
    ("GET", "/livez"): public(),
    ("GET", "/readyz"): public(),
    ("GET", "/state"): READ,
    ("GET", "/cells"): READ,
    # a cell's state in Diego's terms, for Cloud Foundry's tools (cfdot cell-states: rep/diego_state.py)
    ("GET", "/v1/diego/cells/{cell_id}/state"): rule("cf", "auctioneer", "bbs", *READ_ROLES),
    ("POST", "/work"): rule("auctioneer", why="work comes from the auctioneer holding the lease"),
    ("POST", "/stop"): rule("bbs", why="the BBS stops instances"),
    ("POST", "/cancel"): rule("bbs", why="the BBS cancels tasks"),
    ("POST", "/cordon"): rule("bbs", why="the BBS tells a rep the operator cordoned its cells"),
    ("POST", "/evacuate"): rule("admin", why="evacuating cells is an operator's decision"),
    ("GET", "/metrics"): rule(*READ_ROLES),
    ("GET", "/usage"): READ,
    ("GET", "/logs"): rule("bbs", why="logs can hold what an app printed, secrets too: the BBS serves them "
                                      "to the callers it allows"),
    ("GET", "/instances/{instance_guid}/exec"): rule("bbs", why="a command in an instance runs as the app: "
                                                               "the BBS relays it for an admin"),
})
