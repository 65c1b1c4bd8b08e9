"""Builds the optional C extension; the project's metadata lives in pyproject.toml.

``spark_connector._native_records`` decodes Kafka record batches into Arrow buffers for the
fetch reader. It is optional: without a C compiler the install still succeeds and
``spark_connector.record_batches`` falls back to its pure-Python decoder (logging a warning).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "spark_connector._native_records",
            ["spark_connector/_native_records.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
