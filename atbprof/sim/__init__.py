"""Simulation: step expansion over arrays, the host->device task queue, and the run orchestrator."""
