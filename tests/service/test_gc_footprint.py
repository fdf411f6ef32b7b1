"""Full garbage-collection passes stay short under endless new shapes: start-up objects are frozen
out of the collector's scans and the answers the service keeps are mostly untracked bytes."""
from __future__ import annotations

import gc
import random

from fastapi.testclient import TestClient

from service.app import create_app


def test_tracked_objects_stay_few_after_many_new_shapes(settings):
    app = create_app(settings)
    with TestClient(app):
        assert gc.get_freeze_count() > 10_000  # modules, routes and tables left the scans at start-up
        rng = random.Random(7)
        for _ in range(5000):
            query = f"m={rng.randint(1, 65536)}&n={rng.randint(1, 262144)}&dtype=bf16&gpu=h100"
            assert app.fast_dispatch._answer(query.encode()) is not None
        gc.collect()
        tracked = len(gc.get_objects())  # what a full pass would scan
    gc.unfreeze()  # leave the rest of the test session as it was
    assert tracked < 15_000, f"{tracked} objects tracked after 5,000 new shapes"
