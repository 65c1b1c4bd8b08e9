"""Millrace's broker package: a Kafka-compatible broker (the layout is in ../shared/DESIGN.md).

Importing it first imports ``kio`` without the Hypothesis hooks ``kio`` registers when the
test tools are installed (:mod:`kio_loader`): they cost a broker ~20 MB of steady
memory and, on its first start in a directory, a ~200 MB transient.
"""

from kio_loader import import_kio_without_hypothesis

import_kio_without_hypothesis()
