"""A harness that fails at import (a missing setting): refused by name, without a traceback."""

raise RuntimeError("LAB_DATA_DIR is not set\nsecond line not shown")
