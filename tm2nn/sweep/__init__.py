"""Sweeps (``tm2nn sweep``): a TOML spec expanded into tasks, each a call of the public API,
run on a local process pool or a Ray cluster, each finished task one row of a results
table that survives faults (docs/sweep.md)."""
