"""Where a crop lands (``_media/crops.py``): pure arithmetic over the image's size and the generator."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._media import crops
from shufflepoint._media.crops import Box


def test_the_docstring_s_worked_example() -> None:
    box = crops.random_box(600, 400, np.random.default_rng(0), (1.0, 1.0), (1.0, 1.0))
    assert (box.left, box.top, box.width, box.height) == (100, 0, 400, 400)


@settings(max_examples=300, deadline=None)
@given(width=st.integers(1, 5000), height=st.integers(1, 5000), seed=st.integers(0, 2**32 - 1),
       low=st.floats(0.01, 1.0), high=st.floats(0.01, 1.0), r1=st.floats(0.2, 5.0), r2=st.floats(0.2, 5.0))
def test_a_random_box_lies_inside_the_image_with_an_area_and_aspect_in_range(width, height, seed, low, high, r1,
                                                                            r2) -> None:
    scale, ratio = (min(low, high), max(low, high)), (min(r1, r2), max(r1, r2))
    box = crops.random_box(width, height, np.random.default_rng(seed), scale, ratio)
    assert 0 <= box.left and box.left + box.width <= width and box.width >= 1
    assert 0 <= box.top and box.top + box.height <= height and box.height >= 1
    again = crops.random_box(width, height, np.random.default_rng(seed), scale, ratio)
    assert again == box  # a function of the generator alone
    fallback = crops.fallback_box(width, height, ratio)
    if (box.left, box.top, box.width, box.height) != (fallback.left, fallback.top, fallback.width, fallback.height):
        # one of the tries fitted: its area and aspect are drawn
        share = box.width * box.height / (width * height)
        slack = (box.width + box.height + 1) / (width * height)  # rounding each side: under a row and a column
        assert scale[0] - slack <= share <= scale[1] + slack
        aspect_slack = 1 / min(box.width, box.height) + 1 / min(box.width, box.height) ** 2
        assert ratio[0] * (1 - aspect_slack) - 1e-9 <= box.width / box.height
        assert box.width / box.height <= ratio[1] * (1 + aspect_slack) * (1 + 2 / box.height) + 1e-9


@settings(max_examples=200, deadline=None)
@given(width=st.integers(1, 5000), height=st.integers(1, 5000), out_w=st.integers(1, 1024),
       out_h=st.integers(1, 1024), left=st.integers(0, 4999), top=st.integers(0, 4999))
def test_the_reduction_keeps_the_box_at_least_the_target_size(width, height, out_w, out_h, left, top) -> None:
    box = Box(min(left, width - 1), min(top, height - 1), width - min(left, width - 1), height - min(top, height - 1))
    factor = crops.reduction(box, (out_w, out_h))
    assert factor in (1, 2, 4, 8)
    if factor > 1:
        assert box.width / factor >= out_w and box.height / factor >= out_h
    if factor < 8:
        assert box.width / (factor * 2) < out_w or box.height / (factor * 2) < out_h


def test_the_centre_box_is_the_largest_centred_box_of_the_aspect() -> None:
    assert crops.center_box(640, 480) == Box(80, 0, 480, 480)
    assert crops.center_box(300, 451) == Box(0, 75, 300, 300)
    assert crops.center_box(640, 480, 2.0) == Box(0, 80, 640, 320)
    assert crops.center_box(640, 480, 0.5) == Box(200, 0, 240, 480)


@pytest.mark.parametrize("name,value", [("scale", (0.0, 1.0)), ("scale", (0.5, 0.2)), ("scale", (0.1, 1.5)),
                                        ("ratio", (0, 1)), ("ratio", "wide"), ("ratio", (math.nan, 1.0))])
def test_a_bad_range_is_refused_naming_it(name, value) -> None:
    high = 1.0 if name == "scale" else float("inf")
    with pytest.raises(ValueError, match=rf"{name}: found .*\n  expected: a pair \(min, max\)"):
        crops.check_range(name, value, 0.0, high)
