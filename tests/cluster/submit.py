#!/usr/bin/env python3
"""A stand-in batch system for tests: start the job script as its own background process.

Prints the job id (the process id); the exit code is written to <id>.exit next to this file's
state directory when the job ends, for status.py to read.
"""

import os
import subprocess
import sys
from pathlib import Path

state = Path(os.environ["SIMREPORT_TEST_CLUSTER_STATE"])
state.mkdir(parents=True, exist_ok=True)
jobscript = sys.argv[-1]
wrapper = (
    f'bash "{jobscript}" > "{state}/$$.out" 2>&1; echo $? > "{state}/$$.exit.tmp"; '
    f'mv "{state}/$$.exit.tmp" "{state}/$$.exit"'
)
proc = subprocess.Popen(
    ["bash", "-c", wrapper],
    stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
    start_new_session=True,
)
print(proc.pid)
