"""Imported once by a fork server before it forks run processes: the kernel and every world
loaded, and each world's code fingerprint computed, so that a run process (a fork of that
server) finds them in memory rather than parsing the kernel's sources again."""

from __future__ import annotations

from ..kernel import kernel_fingerprint
from ..kernel.worlds import WORLDS

for _world in WORLDS.names():
    kernel_fingerprint(_world)
kernel_fingerprint(None)
