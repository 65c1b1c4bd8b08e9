"""Spark's Python processes import PySpark's compiled modules instead of recompiling its zip.

Spark starts every Python process of a query (a Python data source's streaming runner and
read planner, the executors' worker daemon and the workers it forks; the driver too under
``spark-submit``) with ``$SPARK_HOME/python/lib/pyspark.zip`` first on ``PYTHONPATH``. The zip
holds PySpark's sources only (no ``.pyc``), and ``zipimport`` never caches what it compiles,
so each of those processes compiles PySpark anew: 0.8-0.9 s of CPU per process on a 2-core
machine (importing ``pyspark.sql.streaming.python_streaming_source_runner`` takes 1.0-1.1 s
from the zip against 0.2-0.3 s from the installed package). A streaming query's first
micro-batch waits for three such processes, one after the other.

When PySpark is installed with pip, ``SPARK_HOME`` is the installed package itself and the zip
is ``<site-packages>/pyspark/python/lib/pyspark.zip``: the same sources as
``<site-packages>/pyspark``, which pip compiled at install. :func:`prefer_compiled_pyspark`
moves such a zip just behind that ``site-packages`` entry of ``sys.path``, so ``import
pyspark`` finds the compiled package; nothing else changes (the zip holds only ``pyspark``).
A zip from any other Spark (a Spark distribution's ``SPARK_HOME``) is left where it is.

It runs at interpreter start-up from ``millrace-pyspark-path.pth`` (installed into
``site-packages`` beside this module), and only in processes whose ``PYTHONPATH`` names
``pyspark.zip``; ``MILLRACE_PYSPARK_ZIP=keep`` in the environment turns it off. It imports
nothing but :mod:`os` and :mod:`sys`, and nothing of the project's (it is below every floor).

Concurrency: called once, at start-up, before any thread exists.
"""

from __future__ import annotations

import os
import sys

ZIP_NAME = "pyspark.zip"
OPT_OUT = "MILLRACE_PYSPARK_ZIP"


def _installed_site(zip_entry: str) -> str | None:
    """The ``site-packages`` directory whose ``pyspark`` package holds ``zip_entry``
    (``<site>/pyspark/python/lib/pyspark.zip``), or None for a zip of another Spark."""
    lib = os.path.dirname(zip_entry)
    python = os.path.dirname(lib)
    package = os.path.dirname(python)
    if (
        os.path.basename(zip_entry) != ZIP_NAME
        or os.path.basename(lib) != "lib"
        or os.path.basename(python) != "python"
        or os.path.basename(package) != "pyspark"
        or not os.path.isfile(os.path.join(package, "__init__.py"))
    ):
        return None
    return os.path.dirname(package)


def prefer_compiled_pyspark(path: list[str] | None = None) -> bool:
    """Move an installed PySpark's own ``pyspark.zip`` behind its ``site-packages`` entry in
    ``path`` (default ``sys.path``), in place; True when something moved."""
    entries = sys.path if path is None else path
    if os.environ.get(OPT_OUT) == "keep":
        return False
    moved = False
    for entry in [e for e in entries if e.endswith(ZIP_NAME)]:
        site = _installed_site(os.path.realpath(entry))
        if site is None:
            continue
        position = next(
            (i for i, e in enumerate(entries) if e and os.path.realpath(e) == site), None
        )
        if position is None or position < entries.index(entry):
            continue  # not importable from site-packages, or it already comes first
        entries.remove(entry)
        entries.insert(position, entry)  # the site entry shifted left by one: zip after it
        moved = True
    return moved
