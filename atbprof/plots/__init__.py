"""Figures: one module per figure kind behind the `Plot` interface (base.py); targets.py says what each input draws."""
