"""Task graph validation against happened-before (seed chapter 3.3)."""

from __future__ import annotations

import itertools

import pytest

from airlane.sync import (
    Causality,
    TaskGraphError,
    VersionVector,
    validate_task_graph,
)


def run_text_align_image() -> dict[str, VersionVector]:
    """Three modules (llm, aligner, unet) run Text, then Align, then Img, each passing its
    vector clock on with its output (increment locally, merge on receive)."""
    text = VersionVector().increment("llm")
    align = VersionVector().merge(text).increment("aligner")
    image = VersionVector().merge(align).increment("unet")
    return {"Text": text, "Align": align, "Img": image}


def test_seed_row_text_align_img_complies():
    clocks = run_text_align_image()
    report = validate_task_graph(clocks, [("Text", "Align"), ("Align", "Img")])
    assert report.ok
    assert report.edges_checked == 2


def test_seed_row_img_align_text_violates_on_every_edge():
    clocks = run_text_align_image()  # what actually ran: Text, then Align, then Img
    report = validate_task_graph(clocks, [("Img", "Align"), ("Align", "Text")])
    assert not report.ok
    assert [(v.edge, v.relation) for v in report.violations] == [
        (("Img", "Align"), Causality.AFTER),
        (("Align", "Text"), Causality.AFTER),
    ]
    assert str(report.violations[0]).startswith("Img -> Align: Img must happen before Align")


def test_the_seeds_literal_vectors():
    # Seed table: Text -> Align -> Img from [1,0,0] to [2,1,3] complies.
    actors = ("llm", "aligner", "unet")

    def vc(*counts):
        return VersionVector(dict(zip(actors, counts, strict=True)))

    ok = {"Text": vc(1, 0, 0), "Align": vc(2, 1, 0), "Img": vc(2, 1, 3)}
    assert validate_task_graph(ok, [("Text", "Align"), ("Align", "Img")]).ok


def test_concurrent_and_equal_steps_are_violations_too():
    a = VersionVector({"llm": 1})
    b = VersionVector({"unet": 1})  # ran without seeing a's output
    report = validate_task_graph({"a": a, "b": b, "c": a}, [("a", "b"), ("a", "c")])
    assert [v.relation for v in report.violations] == [Causality.CONCURRENT, Causality.EQUAL]


def test_unknown_steps_are_all_named():
    with pytest.raises(TaskGraphError) as caught:
        validate_task_graph({"a": VersionVector()}, [("a", "x"), ("y", "a")])
    assert caught.value.unknown == ("x", "y")


@pytest.mark.parametrize(
    ("edges", "cycle"),
    [
        ([("a", "a")], ("a", "a")),
        ([("a", "b"), ("b", "c"), ("c", "a")], ("a", "b", "c", "a")),
        ([("z", "a"), ("a", "b"), ("b", "a")], ("a", "b", "a")),
    ],
)
def test_cycles_are_reported_with_their_path(edges, cycle):
    clocks = {name: VersionVector() for name in "abcz"}
    with pytest.raises(TaskGraphError, match="cycle") as caught:
        validate_task_graph(clocks, edges)
    assert caught.value.cycle == cycle


def test_deep_graphs_do_not_recurse():
    names = [f"s{i}" for i in range(5_000)]
    clock = VersionVector()
    clocks = {}
    for name in names:
        clock = clock.increment("worker")
        clocks[name] = clock
    edges = list(itertools.pairwise(names))
    assert validate_task_graph(clocks, edges).ok
