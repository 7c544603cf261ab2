"""The auctioneer service: the placement engine behind an HTTP API, a batch loop and clients of the peers.

app.py composes it; batcher.py queues requests and runs one auction at a time; auction.py is one
auction (cells -> engine -> work -> failures); cells.py fetches bids; convert.py maps wire models to the
engine's dataclasses; dispatch.py sends work to reps; reporter.py tells the BBS what could not be placed.
"""
