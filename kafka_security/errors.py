"""The one configuration error of Millrace (``broker.config_def`` re-exports it): an unknown
property or an invalid value; the message names the property and never holds a password."""

from __future__ import annotations


class ConfigError(ValueError):
    """An unknown property or an invalid value; the message names the property."""
