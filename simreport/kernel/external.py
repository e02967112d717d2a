"""External simulators: a command that takes --config, --seed and --out and writes result.json.

This lets a Mesa, Concordia or in-house model be audited with the same plans and statistics. A
command that exits non-zero, times out or writes an invalid result becomes a failed run, with the
tail of its stderr in the failure message.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pydantic import ValidationError

from ..core.canonical import pretty_json
from ..core.errors import RunError
from ..core.execution_policy import ExecutionPolicy, resolve_simulator
from ..core.redaction import redact_document, redact_text
from ..core.schema import RunResult, Scenario
from ..core.validation import issues_from
from . import interrupt
from .context import SeedTree

# An external simulator's outputs are not fixed by simreport: each scenario declares them at these
# paths, and a completed result that lacks a declared metric is an invalid result.
DECLARED_OUTPUTS = {"metrics": "simulator.metrics", "distributions": "simulator.distributions"}

STREAM_EXTERNAL = 7
STDERR_TAIL = 2000
SIMULATOR_POLL_SECONDS = 0.1


def _tail(data: bytes | str | None) -> str:
    if not data:
        return ""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    # A simulator that prints its endpoint must not publish the endpoint's credentials.
    return redact_text(text.strip())[-STDERR_TAIL:]


def _asset(arg: str, root: Path | None) -> Path | None:
    """The file an argument names next to the scenario, if it names one."""
    if root is None or not ("/" in arg or "." in arg):
        return None
    candidate = Path(arg) if Path(arg).is_absolute() else root / arg
    return candidate.resolve() if candidate.is_file() else None


def simulator_assets(
    scenario: Scenario, root: Path | None, resources: ExecutionPolicy | None = None
) -> dict[str, Path]:
    """Files that its simulator command names (hashed into the manifest): next to the scenario,
    or of the command the execution policy declares under the simulator's name (none while the
    name is not declared: the run fails in LOADING)."""
    if scenario.simulator is None:
        return {}
    try:
        command, _, _ = resolve_simulator(scenario, resources)
    except RunError:
        return {}
    found = {arg: _asset(arg, root) for arg in command}
    return {arg: path for arg, path in found.items() if path is not None}


def _command(command: list[str], root: Path | None) -> list[str]:
    out = []
    for i, arg in enumerate(command):
        asset = _asset(arg, root)
        if asset is not None:
            out.append(str(asset))
        elif i == 0 and arg in {"python", "python3"}:
            # Run Python simulators with the interpreter simreport runs on.
            out.append(sys.executable)
        else:
            out.append(arg)
    return out


def _run_simulator(
    command: list[str],
    *,
    cwd: Path | None,
    timeout: float,
    scratch: Path,
    environment: tuple[str, ...] | None = None,
) -> tuple[int, bytes]:
    """Run the simulator to its end and return its exit status and stderr. It is stopped (its
    whole process group) when it outlives `timeout`, when a stop is requested, and when this
    process exits because its parent died. `environment`: the variables of this process it
    gets (None: all)."""
    env = None
    if environment is not None:
        env = {name: os.environ[name] for name in environment if name in os.environ}
    stderr_path = scratch / "stderr"
    with open(stderr_path, "wb") as stderr_file:
        try:
            proc = subprocess.Popen(
                command,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr_file,
                start_new_session=True,
            )
        except OSError as exc:
            raise RunError(f"cannot start simulator: {exc}", kind="SimulatorNotFound") from None
        deadline = time.monotonic() + timeout
        try:
            with interrupt.child_process_group(proc.pid):
                while True:
                    try:
                        proc.wait(timeout=SIMULATOR_POLL_SECONDS)
                        break
                    except subprocess.TimeoutExpired:
                        interrupt.check()
                    if time.monotonic() > deadline:
                        raise RunError(
                            f"simulator timed out after {timeout:g} s; stderr: "
                            + _tail(stderr_path.read_bytes()),
                            kind="SimulatorTimeout",
                        )
        finally:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return proc.returncode, stderr_path.read_bytes()


def run_external(
    scenario: Scenario,
    out: Path,
    *,
    condition: str,
    replication: int,
    root: Path | None,
    resources: ExecutionPolicy | None = None,
) -> RunResult:
    """Run the scenario's simulator command (its own, or the one `resources` declares under
    its name) and read back its result."""
    assert scenario.simulator is not None
    own_command, timeout, environment = resolve_simulator(scenario, resources)
    sim_dir = out / "external"
    sim_dir.mkdir(exist_ok=True)
    (sim_dir / "result.json").unlink(missing_ok=True)
    seed = SeedTree(scenario.seed, scenario.seed_path).integer(STREAM_EXTERNAL) % (2**31)
    doc = scenario.to_doc()
    with tempfile.TemporaryDirectory(prefix="simreport-config-") as private:
        config = (out / "scenario.json").resolve()
        if redact_document(doc) != doc:
            # The run folder's scenario.json has its credentials redacted; the simulator gets
            # the real document in a private file that is gone when it exits.
            config = Path(private) / "scenario.json"
            config.write_text(pretty_json(doc), encoding="utf-8")
        command = [
            *_command(own_command, root),
            "--config",
            str(config),
            "--seed",
            str(seed),
            "--out",
            str(sim_dir.resolve()),
        ]
        returncode, stderr = _run_simulator(
            command, cwd=root, timeout=timeout, scratch=Path(private), environment=environment
        )
    if returncode != 0:
        raise RunError(
            f"simulator exited with status {returncode}; stderr: {_tail(stderr)}",
            kind="SimulatorFailed",
        )
    path = sim_dir / "result.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunError(
            f"simulator wrote no result.json; stderr: {_tail(stderr)}",
            kind="SimulatorInvalidResult",
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise RunError(
            f"simulator result.json is not valid JSON ({exc}); stderr: {_tail(stderr)}",
            kind="SimulatorInvalidResult",
        ) from None
    if not isinstance(data, dict):
        raise RunError("simulator result.json is not an object", kind="SimulatorInvalidResult")
    # The simulator does not know our condition id; it may leave these out.
    data.setdefault("schemaVersion", 1)
    data["condition"] = condition
    data["replication"] = replication
    data["seedPath"] = list(scenario.seed_path)
    try:
        result = RunResult.model_validate(data)
    except ValidationError as exc:
        issue = issues_from(exc)[0]
        raise RunError(
            f"simulator result.json is invalid at {issue.path or 'top level'}: {issue.message}",
            kind="SimulatorInvalidResult",
        ) from None
    missing = [m for m in scenario.simulator.metrics if m not in result.metrics]
    if result.failure is None and result.status.execution == "completed" and missing:
        raise RunError(
            "simulator result.json lacks declared metrics: " + ", ".join(missing),
            kind="SimulatorInvalidResult",
        )
    return result
