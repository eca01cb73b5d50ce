"""All tasks by name: the C-RASP paper's regular languages and algorithmic tasks, the
positional-attention papers' numeric tasks and the Chomsky-hierarchy benchmark."""

from __future__ import annotations

import difflib
from functools import cache

from crasp_compiler.errors import CraspError, Diagnostic
from crasp_compiler.experiments.tasks.base import Task


@cache
def all_tasks() -> dict[str, Task]:
    """Every registered task, by name, in family order."""
    from crasp_compiler.experiments.tasks import algorithmic, chomsky, numeric, regular

    tasks: dict[str, Task] = {}
    for module in (regular, algorithmic, numeric, chomsky):
        for task in module.TASKS:
            if task.name in tasks:
                raise ValueError(f"two tasks named {task.name!r}")
            tasks[task.name] = task
    return tasks


def get_task(name: str) -> Task:
    """The task called ``name`` (CraspError with the closest names otherwise)."""
    tasks = all_tasks()
    if name in tasks:
        return tasks[name]
    close = difflib.get_close_matches(name, tasks, n=3)
    hint = f"did you mean {', '.join(close)}?" if close else "`crasp tasks` lists them"
    raise CraspError([Diagnostic(f"unknown task {name!r}", hint=hint)])
