"""Validate an executed task graph against the happened-before relation (seed chapter 3.3).

A multimodal generation runs as a DAG of steps (text, alignment, image, ...). Each step records
the vector clock at which it ran (`airlane.sync.vclock`); an edge ``a -> b`` says ``b`` consumes
``a``'s output, so ``a`` must have happened before ``b``: ``clock[a].compare(clock[b])`` must be
``BEFORE``. `validate_task_graph` checks every edge and reports every violation, each with the
offending edge and the relation actually found (``AFTER``: ran in the wrong order;
``CONCURRENT``: ran without seeing its input; ``EQUAL``: the two steps were never told apart).

A graph that cannot be checked is the caller's error, raised as `TaskGraphError`: edges naming
steps without a recorded clock (all of them are listed) or a cycle (one is shown).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from airlane.sync.errors import TaskGraphError
from airlane.sync.vclock import Causality, VersionVector

__all__ = ["ValidationReport", "Violation", "validate_task_graph"]


@dataclass(frozen=True, slots=True)
class Violation:
    """An edge whose source did not happen before its target."""

    edge: tuple[str, str]
    """The offending edge, ``(source, target)``."""
    relation: Causality
    """How the source's clock relates to the target's (anything but ``BEFORE``)."""
    source_clock: VersionVector
    """The clock the source step ran at."""
    target_clock: VersionVector
    """The clock the target step ran at."""

    def __str__(self) -> str:
        source, target = self.edge
        return (
            f"{source} -> {target}: {source} must happen before {target}, but its clock is "
            f"{self.relation.value} ({dict(self.source_clock.entries)} vs "
            f"{dict(self.target_clock.entries)})"
        )


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """The result of `validate_task_graph`: every violation, in edge order."""

    violations: tuple[Violation, ...]
    """Each edge that breaks happened-before."""
    edges_checked: int
    """How many edges were checked."""

    @property
    def ok(self) -> bool:
        """True if every edge respects happened-before."""
        return not self.violations


def validate_task_graph(
    clocks: Mapping[str, VersionVector], edges: Iterable[tuple[str, str]]
) -> ValidationReport:
    """Check that for every edge ``a -> b``, step ``a`` happened before step ``b``.

    ``clocks`` maps each executed step to the vector clock it ran at. Raises `TaskGraphError`
    if an edge names a step missing from ``clocks``, or if the edges form a cycle.
    """
    edge_list = list(edges)
    unknown = sorted({name for edge in edge_list for name in edge if name not in clocks})
    if unknown:
        raise TaskGraphError(f"edges name steps with no recorded clock: {unknown}", unknown=unknown)
    cycle = _find_cycle(edge_list)
    if cycle:
        raise TaskGraphError(f"the task graph has a cycle: {' -> '.join(cycle)}", cycle=cycle)
    violations = []
    for source, target in edge_list:
        relation = clocks[source].compare(clocks[target])
        if relation is not Causality.BEFORE:
            violations.append(Violation((source, target), relation, clocks[source], clocks[target]))
    return ValidationReport(tuple(violations), len(edge_list))


def _find_cycle(edges: Sequence[tuple[str, str]]) -> list[str]:
    """One cycle as a path whose first step repeats at the end, or [] if there is none."""
    successors: dict[str, list[str]] = {}
    for source, target in edges:
        successors.setdefault(source, []).append(target)
        successors.setdefault(target, [])
    done: set[str] = set()
    for root, first in successors.items():
        if root in done:
            continue
        # Iterative DFS (graphs may be deep): the path is the grey set, in order.
        path, on_path = [root], {root}
        pending = [iter(first)]
        while pending:
            step = next(pending[-1], None)
            if step is None:
                pending.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if step in on_path:
                return [*path[path.index(step) :], step]
            if step not in done:
                path.append(step)
                on_path.add(step)
                pending.append(iter(successors[step]))
    return []
