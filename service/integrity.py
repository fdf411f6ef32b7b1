"""What the server knows of its database's health, for ``/healthz`` and for refusing uploads.

A damaged database does not heal by itself, so damage, once seen, stays reported until a deep check
(``GET /healthz?deep=1``) finds the file whole again: it is seen by the start-up check (which then
refuses to start, see ``service.app``), by a deep check, or by any read or upload that fails with a
damaged-file error. While it stands, ``/healthz`` answers 503 and uploads are refused with the reason.
A read-only database or a full disk is not remembered this way: it can be mended while the server
runs, so each upload finds out for itself (and is answered 503 / 507 with the reason, see
``service.routes.runs``); a deep check reports it too.
"""
from __future__ import annotations

import time

from db.integrity import StorageProblem, storage_problem


class DatabaseCondition:
    def __init__(self) -> None:
        self.damage: StorageProblem | None = None
        self.last_check: StorageProblem | None = None
        self.checked_at: float | None = None

    def note_failure(self, exc: BaseException) -> StorageProblem | None:
        """Record what a failed read or write says of the database; returns its problem, if any."""
        problem = storage_problem(exc)
        if problem is not None:
            self.note_problem(problem)
        return problem

    def note_problem(self, problem: StorageProblem) -> None:
        if problem.kind == "damaged":
            self.damage = problem

    def record_check(self, problem: StorageProblem | None) -> None:
        """The verdict of a full check (start-up or deep): it replaces what failures suggested."""
        self.last_check = problem
        self.checked_at = time.time()
        self.damage = problem if problem is not None and problem.kind == "damaged" else None
