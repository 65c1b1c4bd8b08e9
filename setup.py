"""Builds the optional C extension; the project's metadata lives in pyproject.toml.

``broker.protocol._request_check`` walks a request body against its schema before kio
decodes it (falling back to ``request_walk._walk_py``).
``broker.protocol._record_check`` walks the records of a produced batch to validate them
(falling back to ``broker.log.log_validator._check_records_py``).
``spark_connector.records._native_records`` decodes Kafka record batches into Arrow buffers
for the fetch reader; ``spark_connector.records._native_batches`` encodes Arrow columns as
record batches for the writer (falling back to ``spark_connector.records.encoder``'s
pure-Python functions).
``broker.log.cleaner._native_cleaner`` is the log cleaner's record scan and offset map (falling
back to the pure-Python cleaner, its reference). It is optional: without a C compiler the install still succeeds and
``spark_connector.records.decoder`` falls back to its pure-Python decoder (logging a warning).

``build_py`` also puts ``millrace-pyspark-path.pth`` at the top of the built tree, so that a
``pip install`` puts it into ``site-packages``: at start-up it makes Spark's Python processes
import the installed, compiled PySpark instead of compiling ``pyspark.zip``
(:mod:`millrace_pyspark_path`). An editable install leaves it out; ``make setup`` copies it.
"""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

PTH = "millrace-pyspark-path.pth"


class BuildPyWithPth(build_py):
    """Also puts ``millrace-pyspark-path.pth`` at the top of the built tree, so that it lands
    in ``site-packages`` (see :mod:`millrace_pyspark_path`)."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / PTH
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(__file__).parent / PTH, target)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


setup(
    cmdclass={"build_py": BuildPyWithPth},
    ext_modules=[
        Extension(
            "broker.protocol._request_check",
            ["broker/protocol/_request_check.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "broker.protocol._record_check",
            ["broker/protocol/_record_check.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "spark_connector.records._native_records",
            ["spark_connector/records/_native_records.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "spark_connector.records._native_batches",
            ["spark_connector/records/_native_batches.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "broker.log.cleaner._native_cleaner",
            ["broker/log/cleaner/_native_cleaner.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ],
)
