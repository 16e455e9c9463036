"""pytest setup for tests/python and tests/gpu: import the in-tree package (python/) and the shared test helpers
(tests/python/cf_testlib.py). The library is found by python/convfuse/_lib.py: $CONVFUSE_LIBRARY, else build*/."""

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
for p in (_ROOT / "python", _ROOT / "tests" / "python"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
