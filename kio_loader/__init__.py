"""Importing ``kio`` without its Hypothesis hooks, so neither a broker nor a Spark worker
carries a test tool.

``kio`` (the Kafka protocol's message classes, used by the broker and by the Spark connector's
wire client) registers a Hypothesis strategy for each of its phantom types (``TopicName``,
``i32``, ...) when ``kio.static._phantom`` is imported and Hypothesis is installed, as it is
in the development environment (the ``test`` extra, which ``make setup`` installs).
Registering the ``str`` types builds Hypothesis's Unicode character map: without the cache
file Hypothesis keeps in ``.hypothesis/`` of the *current directory* that is a ~200 MB
transient allocation lasting a second or more, and it writes ``.hypothesis/`` into that
directory. A broker started by ``millrace cluster up`` runs in a fresh directory, so every
first start paid it (a 256 MB peak for a broker that then settles at ~66 MB); a Spark Python
worker or streaming-source runner starts in a fresh Spark temporary directory, so the
connector's first Kafka request paid ~1.5 s and ~230 MB in every new worker (the first
micro-batch of a ``format("millrace")`` query waited for it). Even with the cache,
Hypothesis and what it imports (pytest, attrs, trio, pygments: ~300 modules) stay resident,
about 20 MB.

:func:`import_kio_without_hypothesis` imports ``kio.static._phantom`` while ``hypothesis``
is marked unimportable in ``sys.modules`` (its ``except ImportError`` then records that
Hypothesis is absent), and restores ``sys.modules`` afterwards, so Hypothesis itself stays
importable: the tests use it, they only never rely on kio's registrations (they build their
strategies explicitly). The packages that import ``kio`` call it from their ``__init__``
(``broker``, ``spark_connector``, ``kafka_security``), so it runs before any of their modules
imports ``kio``, in every process that uses them: the broker, its log cleaner's worker
processes (``spawn`` re-imports ``broker``), the ``millrace`` command, Spark's driver and
Python workers. This package imports nothing of the project's (it is below every floor).

If ``kio`` was imported before (a process that imported ``kio`` itself first), this does
nothing: the hooks are already registered there.

Concurrency: run at import time, under the import lock; process-wide ``sys.modules`` state.
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["KIO_HOOK_MODULE", "import_kio_without_hypothesis"]

KIO_HOOK_MODULE = "kio.static._phantom"
"""The ``kio`` module whose import registers the Hypothesis strategies."""

_BLOCKED = ("hypothesis", "hypothesis.strategies")


def import_kio_without_hypothesis() -> bool:
    """Import :data:`KIO_HOOK_MODULE` with Hypothesis hidden; True if this import happened
    here, False if ``kio`` had already imported it (or ``kio`` is not installed)."""
    if KIO_HOOK_MODULE in sys.modules:
        return False
    saved = {name: sys.modules[name] for name in _BLOCKED if name in sys.modules}
    for name in _BLOCKED:
        sys.modules[name] = None  # type: ignore[assignment]  # "import halted": ImportError
    try:
        importlib.import_module(KIO_HOOK_MODULE)
    except ImportError:
        return False
    finally:
        for name in _BLOCKED:
            del sys.modules[name]
        sys.modules.update(saved)
    return True
