"""One module per output format behind the small `RunWriter` interface (see base.py)."""
