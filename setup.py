"""Build hooks only; the project is configured in pyproject.toml.

Both kinds of install put ``_agent_swarm_moved.py`` and ``_agent_swarm_moved.pth`` at the root of
site-packages, so that ``import orchestrator`` (a name before 0.1) fails with an error naming
``agent_swarm.orchestrator`` (docs/namespace.md). setuptools ships a ``.pth`` only through a command of its
own, as coverage.py does for ``a1_coverage.pth`` and setuptools for ``distutils-precedence.pth``:

- a wheel (``pip install .``, ``pip wheel``): ``build_py`` copies both files to the root of the build;
- an editable install (``pip install -e .``): the PEP 660 wheel holds no package files, only setuptools'
  finder and its ``.pth``; ``editable_wheel`` adds both files to that wheel with their RECORD lines. They
  are copies: after changing ``_agent_swarm_moved.py``, run ``pip install -e .`` again.
"""

import base64
import hashlib
import os
import zipfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

ROOT = Path(__file__).resolve().parent
HOOK = ("_agent_swarm_moved.py", "_agent_swarm_moved.pth")


class BuildPyWithHook(build_py):
    """``build_py``, plus the hook's two files at the root of a (non-editable) build."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            for name in HOOK:
                self.copy_file(str(ROOT / name), os.path.join(self.build_lib, name), preserve_mode=False)


class EditableWheelWithHook(editable_wheel):
    """``editable_wheel``, plus the hook's two files in the editable wheel it builds."""

    def run(self) -> None:
        super().run()
        wheels = sorted(Path(self.dist_dir).glob("*-0.editable-*.whl"))
        if not wheels:
            raise FileNotFoundError(f"no editable wheel in {self.dist_dir} to add {', '.join(HOOK)} to")
        for wheel in wheels:
            _add_to_wheel(wheel, {name: (ROOT / name).read_bytes() for name in HOOK})


def _add_to_wheel(wheel: Path, files: dict[str, bytes]) -> None:
    """Rewrite ``wheel`` with ``files`` at its root and a line for each in its RECORD (written last)."""
    rewritten = wheel.with_name(wheel.name + ".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        for item in src.infolist():
            if item.filename != record_name and item.filename not in files:
                dst.writestr(item, src.read(item))
        record = [line for line in src.read(record_name).decode().splitlines() if line.split(",")[0] not in files]
        for name, data in files.items():
            dst.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={digest},{len(data)}")
        dst.writestr(record_name, "\n".join(record) + "\n")
    rewritten.replace(wheel)


setup(cmdclass={"build_py": BuildPyWithHook, "editable_wheel": EditableWheelWithHook})
