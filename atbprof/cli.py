"""The `atbprof` entry point (kept for `python -m atbprof.cli` and older imports): the commands live in
atbprof/commands/."""

from atbprof.commands import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
