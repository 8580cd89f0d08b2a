"""The converter tests in the two tiers: a parametrized test is a sweep over cases (ops, dtypes,
shapes, options); ``make test`` (the fast tier) runs one case in :data:`EVERY` (the first, the
eleventh...), the others are marked ``slow`` and run with ``make test-all`` (and the CI).

A case marked slow by hand (``pytest.param(..., marks=pytest.mark.slow)``, ``helpers.sweep``) stays
slow and is not counted. A test that is not parametrized is left as it is.
"""

from __future__ import annotations

import pytest

#: the fast tier runs one case in EVERY of each parametrized test, in the order pytest collects
#: them (about 1700 cases of about 0.3 s each: all of them would double the time of ``make test``)
EVERY = 10


@pytest.hookimpl(tryfirst=True)  # before ``-m "not slow"`` deselects
def pytest_collection_modifyitems(config, items):
    here = str(config.rootpath / "tests" / "convert")
    seen: dict[tuple[str, str], int] = {}
    for item in items:
        if getattr(item, "callspec", None) is None or not str(item.path).startswith(here):
            continue
        if item.get_closest_marker("slow") is not None:
            continue
        key = (str(item.path), item.originalname)
        index = seen.get(key, 0)
        seen[key] = index + 1
        if index % EVERY:
            item.add_marker(pytest.mark.slow)
