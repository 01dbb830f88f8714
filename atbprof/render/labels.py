"""Names shared by every view (run, analyze, diff): one name per row."""

CATEGORY_LABELS = {
    "attention": "Attention (with its norm)",
    "ffn": "FFN (with its norm)",
    "other": "other (embedding, LM head, sampling, host loop)",
    "communication": "communication",
    "memory": "memory (device copies and fills)",
}
"""Seed 000's rows; `other` is everything outside the decoder layers' attention and FFN blocks."""
