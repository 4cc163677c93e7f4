"""What ``check_with`` says when a harness's report differs: the first entry that differs, by its path."""

from __future__ import annotations

import pytest
import torch
from autograder import check_with


def report(function, needs):
    """A report as 03's backward_report makes: gradients (None where not needed) and a list of shapes."""
    return {"gradients": function(needs), "computed": [[4, 3]]}


def right(needs):
    return [torch.ones(2, 3) if wanted else None for wanted in needs]


def always(needs):  # computes every gradient, needed or not
    return [torch.ones(2, 3) for _ in needs]


def two_values(needs):  # returns one gradient too few
    return right(needs)[:2]


def scaled(needs):  # right shapes, wrong values
    return [None if g is None else 2 * g for g in right(needs)]


def _message(function, needs) -> str:
    with pytest.raises(AssertionError) as failure:
        check_with(report, function, right, needs)
    return str(failure.value)


def test_a_tensor_where_none_is_right_is_named_by_its_place_and_shape():
    message = _message(always, [False, True, True])
    assert message == ("report(...)['gradients'][0] with your always is a tensor of shape [2, 3]; "
                       "with a right always it is None")


def test_a_list_of_another_length_shows_each_entry_by_its_shape():
    message = _message(two_values, [True, True, False])
    assert message == ("report(...)['gradients'] with your two_values is [a tensor of shape [2, 3], a tensor of "
                       "shape [2, 3]]; with a right two_values it is [a tensor of shape [2, 3], a tensor of shape "
                       "[2, 3], None]")


def test_wrong_values_show_the_values_on_one_line():
    message = _message(scaled, [True, False, True])
    assert message.startswith("report(...)['gradients'][0] with your scaled is tensor([[2., 2., 2.], [2., 2., 2.]]);")
    assert "\n" not in message


def test_the_same_report_passes():
    check_with(report, right, right, [True, False, True])
