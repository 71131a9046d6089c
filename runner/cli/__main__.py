"""`python -m runner.cli`: the same entry point as the `labprobe` console script."""

import sys

from runner.cli import main

sys.exit(main())
