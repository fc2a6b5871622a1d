"""np.unique's answers without its numpy.ma import (a restarted job's first batch pays for that import)."""

import subprocess
import sys

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from shufflepoint._order.distinct import distinct, distinct_inverse, in_first_seen_order

VALUES = arrays(np.int64, st.integers(0, 60), elements=st.integers(-(2**62), 2**62) | st.integers(-3, 3))


@given(VALUES)
def test_the_answers_of_np_unique(values):
    assert np.array_equal(distinct(values), np.unique(values))
    found, at = distinct_inverse(values)
    expected, inverse = np.unique(values, return_inverse=True)
    assert np.array_equal(found, expected) and np.array_equal(at, inverse.reshape(-1))
    _, first = np.unique(values, return_index=True)
    assert np.array_equal(in_first_seen_order(values), values[np.sort(first)])


def test_a_resumed_scheduled_mixture_reads_its_first_batch_without_numpy_ma():
    script = """
import sys, torch, shufflepoint
a = torch.utils.data.TensorDataset(torch.arange(500))
b = torch.utils.data.TensorDataset(torch.arange(300))
mixture = shufflepoint.Mixture([a, b], schedule=[(0, [0.5, 0.5]), (200, [0.2, 0.8])])
loader = shufflepoint.DataLoader(mixture, batch_size=8, seed=1, collate_fn=list)
state = next(iter(loader)) and loader.state_dict()
resumed = shufflepoint.DataLoader(mixture, batch_size=8, seed=1, collate_fn=list)
resumed.load_state_dict(state)
next(iter(resumed))
print("numpy.ma" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
