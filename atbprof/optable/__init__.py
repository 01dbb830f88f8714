"""The op table: one explicit Arrow schema shared by simulation, writers, importers and analyzers."""

from atbprof.optable.schema import OPS_SCHEMA, SCHEMA_VERSION, check_table, read_ops

__all__ = ["OPS_SCHEMA", "SCHEMA_VERSION", "check_table", "read_ops"]
