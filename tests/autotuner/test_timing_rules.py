"""The measurer's rule for disturbed timings (autotuner.tune.measure.steadiest) and the timer's argument checks, without a GPU."""
from __future__ import annotations

import pytest

from autotuner.tune.measure import RETIME_ATTEMPTS, steadiest
from autotuner.tune.timing import Timing, is_unstable


def timings(*spreads):
    queue = [Timing(10.0 * s, 10.0, 10.0 * s, 20, 9.0) for s in spreads]
    calls = []

    def measure():
        calls.append(1)
        return queue.pop(0)

    return measure, calls


def test_a_steady_timing_is_measured_once():
    measure, calls = timings(1.2, 1.0)
    assert steadiest(measure).p80_us == 12.0 and len(calls) == 1


def test_a_disturbed_timing_is_measured_again_and_the_steadiest_kept():
    measure, calls = timings(6.0, 3.0, 1.1)
    result = steadiest(measure)
    assert result.p80_us == 11.0 and len(calls) == 3 and not is_unstable(result.p20_us, result.p80_us)


def test_retiming_stops_after_its_attempts_keeping_the_least_spread():
    measure, calls = timings(9.0, 4.0, 7.0, 1.0)
    result = steadiest(measure)
    assert len(calls) == 1 + RETIME_ATTEMPTS and result.p80_us == 40.0


def test_a_given_first_timing_counts_as_the_first_attempt():
    measure, calls = timings(1.0)
    first = Timing(50.0, 10.0, 60.0, 5, 9.0)
    assert steadiest(measure, first=first).p80_us == 10.0 and len(calls) == 1


def test_graph_launch_timer_rejects_the_graph_method():
    """graph_launch replays a captured call between the cold or warm method's events; the graph
    method already times replays, so asking for both is an error, raised before any GPU work."""
    from autotuner.tune.timing import Timer

    with pytest.raises(ValueError, match="graph_launch"):
        Timer("graph", graph_launch=True)
