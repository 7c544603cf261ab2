"""The chaos campaign: a seeded workload and fault injector on the multi-host cluster, and an independent
checker of what the BBS acknowledged and what really runs (campaign.py)."""
