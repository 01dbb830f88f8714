"""The model graph: LLaMA / GPT decoder layers as the op graph an unfused eager framework issues on the NPU."""
