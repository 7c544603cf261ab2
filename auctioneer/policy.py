"""The auctioneer's authorization table (docs/security.md, "Auctioneer"): one row per route of app.py.

Start requests come from the BBS, or from a standby auctioneer forwarding them to the leader; people and
scripts only read. policy_test.py checks every route has a row.
"""

from __future__ import annotations

from common.auth import READ_ROLES, Policy, public, rule

START = rule(
    "bbs", "auctioneer", why="start requests come from the BBS, or a standby forwarding to the leader"
)

POLICY = Policy({
    ("GET", "/ping"): public(),
    ("GET", "/livez"): public(),
    ("GET", "/readyz"): public(),
    ("POST", "/v1/lrps"): START,
    ("POST", "/v1/tasks"): START,
    ("GET", "/v1/stats"): rule(*READ_ROLES),
    ("GET", "/metrics"): rule(*READ_ROLES),
})
