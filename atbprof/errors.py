"""The one error hierarchy. The CLI catches `AtbprofError` once, prints `str(err)` and exits with `exit_code`."""

from __future__ import annotations


class AtbprofError(Exception):
    """A problem the user can fix; the message names the file/key and the fix. Exit 2 unless a subclass says
    otherwise (1 is kept for "the check ran and failed": validate, --fail-on-unfused, --fail-if-slower)."""

    exit_code = 2


class ConfigError(AtbprofError):
    """An invalid configuration. `problems` holds one line per problem."""

    exit_code = 2

    def __init__(
        self,
        problems: list[str] | str,
        source: str | None = None,
        kinds: list[str] | None = None,
        locs: list[str] | None = None,
    ) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.source = source
        self.kinds = kinds or []  # pydantic's error type per problem, where validation found them
        self.locs = locs or []  # and the dotted key each is about ("" for the config as a whole)
        head = f"invalid config {source}" if source else "invalid config"
        lines = [f"{head}: {len(self.problems)} problem(s)"] if len(self.problems) > 1 else []
        body = [f"  - {p}" for p in self.problems] if lines else [f"{head}: {self.problems[0]}"]
        super().__init__("\n".join(lines + body))


class DoesNotFitError(ConfigError):
    """A config whose model, KV cache and activations do not fit the device's HBM; `estimate` is the memory
    estimate (sim/memory.py MemoryEstimate) that says by how much (a sweep records it as its point's row)."""

    def __init__(self, problems: list[str] | str, estimate: object) -> None:
        super().__init__(problems)
        self.estimate = estimate


class InputError(AtbprofError):
    """An input file that cannot be read as what it claims to be."""

    exit_code = 2


class SchemaError(InputError):
    """An op table whose columns do not match the op schema."""


class UsageError(AtbprofError):
    """A command-line option with a value it cannot take (the message names the option)."""

    exit_code = 2


class OutputExistsError(AtbprofError):
    """Refusing to overwrite something the user already has."""

    exit_code = 3


class Terminated(KeyboardInterrupt):
    """SIGTERM (or SIGHUP) delivered as an exception, so every staged write cleans up as on Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
