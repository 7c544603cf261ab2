"""The simulator behind `vendue simulate`: the placement engine, or the auctioneer's own auction code, run
on a workload file or a built-in scenario, with a report comparing strategies."""
