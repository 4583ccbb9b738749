"""Build hook: generate `airlane.v1` from ``proto/`` into the wheel (see `airlane.v1.generate`).

Everything else about the package is in pyproject.toml.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithProtos(build_py):
    """``build_py`` that also runs protoc on ``proto/airlane/v1/*.proto``."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # a source checkout generates in place (airlane.v1.generate.ensure_generated)
        # Loaded by path: importing the airlane package would import all its dependencies,
        # which a build environment does not have.
        path = Path(__file__).parent / "src" / "airlane" / "v1" / "generate.py"
        spec = importlib.util.spec_from_file_location("_airlane_protos", path)
        assert spec is not None and spec.loader is not None
        protos = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(protos)
        protos.generate(protos.PROTO_ROOT, Path(self.build_lib) / "airlane" / "v1")


setup(cmdclass={"build_py": BuildWithProtos})
