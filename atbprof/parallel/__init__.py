"""Parallel stage of the pipeline: a deployment's ranks (plan), each rank's share of the model (sharding, as data
in atbprof/data/parallel.yaml) and the HCCL collectives that join them (collectives)."""
