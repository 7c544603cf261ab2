"""The BBS's operations, one module per resource, each on the unit of work (bbs/unit_of_work.py)."""
