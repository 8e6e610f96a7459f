"""Build hook that ships the repository's data folders inside the wheel.

``notebooks/``, ``parameters/`` and ``patches/`` sit at the top of the repository (the
layout the design document fixes), outside the ``verifylib`` package, so package data
cannot name them. This hook copies them into ``verifylib/_data/`` of the build tree, where
``verifylib.resources`` finds them after a wheel install. An editable install skips the
copy: it reads the checkout's folders directly. Everything else about the build is
declared in ``pyproject.toml``.

A hook rather than setuptools' ``package-dir`` mapping: that would declare each data
folder an importable package and route the editable install through a path finder, for
files that are only ever read as files.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
DATA_FOLDERS = ("notebooks", "parameters", "patches")


class BuildPyWithData(build_py):
    """``build_py`` that also copies :data:`DATA_FOLDERS` to ``verifylib/_data``."""

    def run(self):
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "verifylib" / "_data"
        # A reused build folder may hold files since removed from the repository.
        shutil.rmtree(target, ignore_errors=True)
        for name in DATA_FOLDERS:
            shutil.copytree(HERE / name, target / name, ignore=shutil.ignore_patterns(
                "__pycache__", ".ipynb_checkpoints", "reports"))


setup(cmdclass={"build_py": BuildPyWithData})
