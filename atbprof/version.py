"""The package version (one place: pyproject.toml's is checked against it by the tests)."""

__version__ = "0.1.0"
