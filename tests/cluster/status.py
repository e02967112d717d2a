#!/usr/bin/env python3
"""Job status for the stand-in batch system: running, success or failed."""

import os
import sys
from pathlib import Path

state = Path(os.environ["SIMREPORT_TEST_CLUSTER_STATE"])
exit_file = state / f"{sys.argv[1]}.exit"
if not exit_file.exists():
    print("running")
elif exit_file.read_text().strip() == "0":
    print("success")
else:
    print("failed")
