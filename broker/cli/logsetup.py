"""Structured logging for Millrace processes: one JSON object per line on stderr, quiet by
default (WARNING), ``--log-level`` to change it."""

from __future__ import annotations

import json
import logging
import logging.config as logging_config
import sys


class JsonFormatter(logging.Formatter):
    """``{"ts": ..., "level": ..., "logger": ..., "msg": ..., "exc": ...}`` per record."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def configure(level: str = "WARNING", config_file: str | None = None) -> None:
    """Set up logging from ``config_file`` (dictConfig JSON) if given, else JSON lines on
    stderr at ``level``."""
    if config_file:
        with open(config_file) as fh:
            logging_config.dictConfig(json.load(fh))
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.WARNING))
    # kazoo is chatty at INFO; keep it at WARNING unless asked for DEBUG
    if root.level > logging.DEBUG:
        logging.getLogger("kazoo").setLevel(max(root.level, logging.WARNING))
