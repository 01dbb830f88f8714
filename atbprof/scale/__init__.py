"""Fan-out of independent per-item work (a cluster's ranks): in process, a local process pool, or a Ray cluster."""
