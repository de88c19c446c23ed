"""A real local Ray for the cluster tests: 2 CPUs, started once for the whole session (about 3 s).

The tests' own helper functions run inside Ray actors, so this package's modules are pickled by value
(pytest imports test files under names the actors cannot import)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_session() -> Iterator[Any]:
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    for name, module in list(sys.modules.items()):
        if name.startswith(("tests.cluster", "test_ray_", "cluster_helpers")) and module is not None:
            ray.cloudpickle.register_pickle_by_value(module)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture
def ray(ray_session: Any) -> Any:
    return ray_session
