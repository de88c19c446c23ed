"""Re-export of :mod:`swarm.rl.export`, this module's home since the layout of ARCHITECTURE.md (README.md
documented ``swarm.export``, so the old import path keeps working)."""

from swarm.rl import export as _home
from swarm.rl.export import *  # noqa: F403  (the whole public surface, as listed in its __all__)

__all__ = _home.__all__
