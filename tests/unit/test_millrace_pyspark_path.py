"""Spark's Python processes import the installed, compiled PySpark rather than compiling
``pyspark.zip`` (``millrace_pyspark_path`` and ``millrace-pyspark-path.pth``)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import millrace_pyspark_path
from millrace_pyspark_path import OPT_OUT, prefer_compiled_pyspark

ROOT = Path(__file__).resolve().parents[2]


def _installed_pyspark(site: Path) -> Path:
    """A pip-like PySpark under ``site``: the package and its own zip; the zip's path."""
    package = site / "pyspark"
    (package / "python" / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    zip_path = package / "python" / "lib" / "pyspark.zip"
    zip_path.write_bytes(b"")
    return zip_path


@pytest.fixture(autouse=True)
def _no_opt_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OPT_OUT, raising=False)


def test_installed_zip_moves_just_behind_its_site_packages(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    zip_path = _installed_pyspark(site)
    py4j = str(site / "pyspark" / "python" / "lib" / "py4j-0.10.9.9-src.zip")
    path = [str(zip_path), py4j, "/user/lib", "/usr/lib/python3.11", str(site), "/after"]

    assert prefer_compiled_pyspark(path)

    assert path == [py4j, "/user/lib", "/usr/lib/python3.11", str(site), str(zip_path), "/after"]


def test_a_spark_distributions_zip_is_left_first(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    _installed_pyspark(site)
    dist_zip = tmp_path / "opt" / "spark" / "python" / "lib" / "pyspark.zip"
    dist_zip.parent.mkdir(parents=True)
    dist_zip.write_bytes(b"")
    path = [str(dist_zip), str(site)]

    assert not prefer_compiled_pyspark(path)

    assert path == [str(dist_zip), str(site)]


def test_nothing_moves_without_the_package_or_its_site_on_the_path(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    zip_path = _installed_pyspark(site)
    elsewhere = [str(zip_path), "/usr/lib/python3.11"]  # site-packages not on the path
    assert not prefer_compiled_pyspark(elsewhere)
    assert elsewhere == [str(zip_path), "/usr/lib/python3.11"]

    (site / "pyspark" / "__init__.py").unlink()  # a zip left behind by a removed package
    path = [str(zip_path), str(site)]
    assert not prefer_compiled_pyspark(path)
    assert path == [str(zip_path), str(site)]


def test_a_zip_already_behind_its_site_stays(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    zip_path = _installed_pyspark(site)
    path = [str(site), "/x", str(zip_path)]
    assert not prefer_compiled_pyspark(path)
    assert path == [str(site), "/x", str(zip_path)]


def test_a_symlinked_site_packages_is_recognised(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    zip_path = _installed_pyspark(site)
    (tmp_path / "lib64").symlink_to(tmp_path / "lib")  # as a venv's lib64
    linked_site = tmp_path / "lib64" / "python3.11" / "site-packages"
    path = [str(zip_path), str(linked_site)]
    assert prefer_compiled_pyspark(path)
    assert path == [str(linked_site), str(zip_path)]


def test_opt_out_keeps_sparks_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site-packages"
    zip_path = _installed_pyspark(site)
    monkeypatch.setenv(OPT_OUT, "keep")
    path = [str(zip_path), str(site)]
    assert not prefer_compiled_pyspark(path)
    assert path == [str(zip_path), str(site)]


def _pyspark_file_in_new_interpreter(env: dict[str, str]) -> tuple[str, bool]:
    """``pyspark.__file__`` in a new interpreter of this environment started with ``env``,
    and whether the start-up hook's module was imported."""
    code = (
        "import sys, pyspark; "
        "print(pyspark.__file__); print('millrace_pyspark_path' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    return out[0], out[1] == "True"


def test_the_installed_hook_runs_in_a_process_started_as_spark_starts_workers() -> None:
    purelib = Path(sysconfig.get_paths()["purelib"])
    assert (purelib / "millrace-pyspark-path.pth").read_text() == (
        ROOT / "millrace-pyspark-path.pth"
    ).read_text(), "make setup installs the .pth into site-packages"
    import pyspark

    package = Path(pyspark.__file__).parent
    zip_path = package / "python" / "lib" / "pyspark.zip"
    assert zip_path.is_file()
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", OPT_OUT)}
    spark_like = {**base, "PYTHONPATH": os.pathsep.join([str(zip_path), str(ROOT)])}

    imported, hooked = _pyspark_file_in_new_interpreter(spark_like)
    assert hooked
    assert Path(imported) == package / "__init__.py"

    imported, _ = _pyspark_file_in_new_interpreter({**spark_like, OPT_OUT: "keep"})
    assert Path(imported) == zip_path / "pyspark" / "__init__.py"

    imported, hooked = _pyspark_file_in_new_interpreter(base)
    assert not hooked  # no pyspark.zip on PYTHONPATH: the hook imports nothing
    assert Path(imported) == package / "__init__.py"


def test_the_pth_left_without_its_module_stays_silent(tmp_path: Path) -> None:
    """A ``.pth`` whose module is gone (an editable checkout removed, the copied ``.pth``
    left) must not print an error in every Spark process: it looks before importing."""
    sitedir = tmp_path / "site"
    sitedir.mkdir()
    (sitedir / "millrace-pyspark-path.pth").write_text(
        (ROOT / "millrace-pyspark-path.pth").read_text()
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "pyspark.zip")}
    env.pop(OPT_OUT, None)
    done = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            f"import site; site.addsitedir({str(sitedir)!r}); print('up')",
        ],
        cwd=tmp_path,  # -S: neither site-packages nor this checkout on sys.path
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert (done.stdout, done.stderr) == ("up\n", "")


def test_a_built_wheel_tree_carries_the_pth(tmp_path: Path) -> None:
    """``pip install`` of the project (not editable) installs the .pth with the module:
    ``setup.py``'s ``build_py`` puts both at the top of the built tree."""
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path / "lib")],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    built = tmp_path / "lib"
    assert (built / "millrace-pyspark-path.pth").read_text() == (
        ROOT / "millrace-pyspark-path.pth"
    ).read_text()
    assert (built / "millrace_pyspark_path.py").read_text() == Path(
        millrace_pyspark_path.__file__
    ).read_text()
