"""Run configuration: YAML -> validated pydantic models (with one clear message per problem)."""

from atbprof.config.loader import load_config, parse_overrides
from atbprof.config.models import RunConfig

__all__ = ["RunConfig", "load_config", "parse_overrides"]
