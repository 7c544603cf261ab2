"""The BBS's HTTP routes, one router per resource; bbs/api.py mounts them (ROUTERS) on the app.

A handler reads its request, calls its resource's operation (bbs/operations/), and writes the answer;
it gets the operations through a dependency (`app.state.bbs`, set by create_app), so a router is data
made once at import, not closures over a BBS.
"""
