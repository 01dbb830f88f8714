"""`python -m atbprof` runs the CLI (the same entry point as the `atbprof` script)."""

from atbprof.commands import main

main()
