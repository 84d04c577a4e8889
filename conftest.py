"""pytest set-up shared by the unit tests and `pytest --nbval`.

Notebooks run in quick mode under pytest unless TRANSFORMER_QUICK is set otherwise: the
kernels nbval starts inherit this environment.

One torch thread in the test process: the unit tests' tensors are small, and a second
thread only spins (about three times the CPU time for the same tests on two cores). The
nbval kernels and the commands the tests start are processes of their own: they keep
torch's default, as a learner's machine does, unless OMP_NUM_THREADS says otherwise.
"""

import os

import torch

os.environ.setdefault("TRANSFORMER_QUICK", "1")
torch.set_num_threads(1)
