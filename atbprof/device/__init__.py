"""The simulated NPU: device specs (data), per-kernel cost model, host dispatch and the task queue."""
