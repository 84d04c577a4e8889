"""pytest set-up shared by the unit tests and `pytest --nbval`.

Notebooks run in quick mode under pytest unless TRANSFORMER_QUICK is set otherwise: the
kernels nbval starts inherit this environment.
"""

import os

os.environ.setdefault("TRANSFORMER_QUICK", "1")
