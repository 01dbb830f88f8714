"""`python -m atbprof` runs the CLI (the same entry point as the `atbprof` script)."""

from atbprof.cli import main

main()
