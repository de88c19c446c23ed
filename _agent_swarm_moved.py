"""The old import names fail with an error that names the new one (issue 27.6, docs/namespace.md).

Before 0.1, agent-swarm installed five top-level packages (``orchestrator``, ``subagents``, ``swarm``,
``tools``, ``workloads``); now everything is under ``agent_swarm``. The distribution installs this module
and ``_agent_swarm_moved.pth`` into site-packages (wheel and editable installs alike: ``setup.py``), and the
``.pth`` calls :func:`install` when the interpreter starts.

The finder goes to the END of ``sys.meta_path``, so it is asked only after every other finder failed: a
user's own ``tools.py`` or ``swarm.py``, or another distribution's ``swarm``, is found first and imports as
it always did. When nothing has one of the five names, an import of it (``import orchestrator``, ``from swarm
import x``, ``import orchestrator.coach``, ``importlib.import_module``) raises a ``ModuleNotFoundError`` whose
``.name`` is that name and whose message names ``agent_swarm.<name>``. A probe
(``importlib.util.find_spec("swarm")``) still gets ``None``: code that checks whether a module exists must
not start raising.

Start-up cost: the module imports nothing (``sys`` is loaded already) and never imports ``agent_swarm``.
"""

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

MOVED = frozenset({"orchestrator", "subagents", "swarm", "tools", "workloads"})


def moved_message(name: str) -> str:
    """The error for an import of ``name``, one of :data:`MOVED`, that nothing on ``sys.path`` provides."""
    return (
        f"No module named {name!r}: agent-swarm's modules moved to agent_swarm.{name} "
        f"(import agent_swarm.{name}, from agent_swarm.{name} import ...; see agent-swarm's docs/namespace.md), "
        f"and no other {name!r} is on sys.path"
    )


class MovedFinder:
    """A meta path finder of last resort for the old top-level names (:data:`MOVED`)."""

    def find_spec(
        self, fullname: str, path: "Sequence[str] | None", target: "ModuleType | None" = None
    ) -> "ModuleSpec | None":
        """``None``, unless an import asks for one of the old top-level names that no other finder has:
        then the ``ModuleNotFoundError`` naming the new path. Finders appended after this one (another
        editable install, a hook a program adds at run time) are asked first, so none is ever shadowed.
        Submodules (``path`` set) are never ours to answer: their parent already imported."""
        if path is not None or fullname not in MOVED:
            return None
        for finder in _finders_after(self):
            find = getattr(finder, "find_spec", None)
            spec: ModuleSpec | None = find(fullname, path, target) if find is not None else None
            if spec is not None:
                return spec
        if not _asked_by_an_import():
            return None
        raise ModuleNotFoundError(moved_message(fullname), name=fullname)


FINDER = MovedFinder()


def install() -> None:
    """Append :data:`FINDER` to the end of ``sys.meta_path`` (once); ``_agent_swarm_moved.pth`` calls this."""
    if not any(finder is FINDER for finder in sys.meta_path):
        sys.meta_path.append(FINDER)


def _finders_after(finder: MovedFinder) -> list[object]:
    meta_path = list(sys.meta_path)
    for i, each in enumerate(meta_path):
        if each is finder:
            return list(meta_path[i + 1 :])
    return []


def _asked_by_an_import() -> bool:
    """Whether an import (not a probe) asked: ``importlib._bootstrap._find_and_load_unlocked`` (``import``,
    ``__import__``, ``importlib.import_module``) called ``_find_spec``, which called ``find_spec``, as CPython's
    importlib does (3.11 run; 3.12 and 3.13 read). ``importlib.util.find_spec`` calls ``_find_spec`` itself. Should a
    Python name these differently, the finder answers ``None`` and the import fails the plain way."""
    try:
        frame = sys._getframe(2)
    except ValueError:
        return False
    caller = frame.f_back
    return (
        frame.f_code.co_name == "_find_spec"
        and caller is not None
        and (caller.f_code.co_name == "_find_and_load_unlocked")
    )
