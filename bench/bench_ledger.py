"""What recording in the run ledger costs.

Prints (i) ingest throughput into SQLite and, when SIMREPORT_TEST_POSTGRES_URL names a server, into
a fresh PostgreSQL database on it, two ways side by side, each into a ledger holding one run
already (the schema check is not timed), best of `--repeat-ingest` fresh ledgers:
  - in bulk, as `simreport ledger ingest` records result folders: `--jobs` processes (default:
    one per core) read, check and write runs, 64 runs to a transaction, each in a savepoint
    of its own (the time includes starting the processes);
  - one run per transaction, as a workflow job records its runs as they finish.
For `refund_desk` the rate counts rows of the `record` table only (testbed records; goal
≥ 20,000 records/s into SQLite in bulk), for `echo_chamber` rows of `event`; every run also
writes its other rows (events, observations, evidence, …), reported as "rows/s". The SQLite
ledger is the default one (db.py): WAL with synchronous=NORMAL, so a committed run survives a
killed process and only a power cut may lose the last ones.

(ii) The wall time of a full `snakemake --cores N` build of the examples (config/config.yaml's
plans, from an empty results folder and an empty run store) with the default ledger and with
`ledger: null`, side by side: `--repeat` rounds, each one build of both, in an order that
alternates from round to round (a machine speeding up or slowing down during the script then
favours neither). Prints every round's ratio and their median, the share the ledger adds (goal
≤ 10 %, judged on that median), and the ratio of the best builds; then the CPU time of each
build's processes, which a disk that is slow to flush (the builds write thousands of files)
does not make vary as it does the wall time. Wall time on a shared machine is noisy: compare
numbers from one run of this script, with --repeat 5 or more.

Everything runs in temporary folders (`--keep DIR` keeps them).

    python bench/bench_ledger.py [--runs 200] [--repeat-ingest 3] [--jobs N] [--cores 2]
                                 [--repeat 5] [--skip i,ii] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

import simreport
from simreport.ledger import connect, ingest_run
from simreport.ledger.db import ENV_VAR
from simreport.ledger.ingest import BULK_GROUP, ingest_runs
from simreport.ledger.queries import counts

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
COPY = ("Snakefile", "rules", "config", "profiles", "envs", "examples", "report")


def make_runs(tmp: Path, example: str, n: int) -> list[Path]:
    """`n` runs of an example (seeds 1…n), files only."""
    runs = []
    for seed in range(1, n + 1):
        out = tmp / example / str(seed)
        simreport.run(ROOT / "examples" / example / "scenario.yaml", out, seed=seed, ledger=False)
        runs.append(out)
    return runs


def throughput(url: str, runs: list[Path], jobs: int, bulk: bool) -> tuple[float, dict[str, int]]:
    """Seconds to ingest `runs[1:]` into a ledger holding `runs[0]` (which created the schema),
    and the rows of every run."""
    engine = connect(url)
    refused: list[tuple[Path, Exception]] = []
    try:
        ingest_run(engine, runs[0])  # creates the schema; not timed
        start = time.perf_counter()
        if bulk:
            ingest_runs(
                engine,
                runs[1:],
                on_run=lambda done: None,
                on_refused=lambda path, exc: refused.append((path, exc)),
                jobs=jobs,
                group=BULK_GROUP,
            )
        else:
            for run in runs[1:]:
                ingest_run(engine, run)
        elapsed = time.perf_counter() - start
        rows = counts(engine)
    finally:
        engine.dispose()
    if refused:
        raise SystemExit(f"runs refused: {refused[:3]}")
    return elapsed, rows


def postgres_database() -> tuple[str, str] | None:
    server = os.environ.get("SIMREPORT_TEST_POSTGRES_URL", "")
    if not server:
        return None
    import sqlalchemy as sa

    base = sa.engine.make_url(server)
    name = f"ledger_bench_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()
    return server, base.set(database=name).render_as_string(hide_password=False)


def drop_database(server: str, url: str) -> None:
    import sqlalchemy as sa

    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        name = sa.engine.make_url(url).database
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()


def part_i(tmp: Path, n: int, repeat: int, jobs: int) -> None:
    samples = {
        "refund_desk": ("record", make_runs(tmp, "refund_desk", n + 1)),
        "echo_chamber": ("event", make_runs(tmp, "echo_chamber", n + 1)),
    }
    targets = [("sqlite", lambda: (None, f"sqlite:///{tmp / uuid.uuid4().hex}.sqlite"))]
    if os.environ.get("SIMREPORT_TEST_POSTGRES_URL"):
        targets.append(("postgresql", postgres_database))  # type: ignore[arg-type]
    ways = {"bulk": f"in bulk ({jobs} processes, {BULK_GROUP} runs a transaction)"}
    ways["one"] = "one run per transaction"
    for database, make in targets:
        for example, (table, runs) in samples.items():
            rates = {}
            for way, label in ways.items():
                best: tuple[float, dict[str, int]] | None = None
                for _ in range(repeat):
                    made = make()
                    assert made is not None
                    server, url = made
                    try:
                        elapsed, rows = throughput(url, runs, jobs, way == "bulk")
                    finally:
                        if server is not None:
                            drop_database(server, url)
                    if best is None or elapsed < best[0]:
                        best = (elapsed, rows)
                assert best is not None
                elapsed, rows = best
                timed = len(runs) - 1
                per_run = rows[table] / len(runs)
                every = sum(rows.values()) / len(runs)
                rates[way] = per_run * timed / elapsed
                print(
                    f"(i) {database:<10} {example:<12} {label}: {timed} runs in {elapsed:.2f} s, "
                    f"{rates[way]:,.0f} {table}s/s ({per_run:,.0f} {table}s per run; all tables "
                    f"{every * timed / elapsed:,.0f} rows/s, {every:,.0f} rows per run; "
                    f"{timed / elapsed:.1f} runs/s)"
                )
            print(
                f"(i) {database:<10} {example:<12} bulk / one run per transaction: "
                f"{rates['bulk'] / rates['one']:.2f}"
            )


def workspace(tmp: Path, ledger: bool) -> Path:
    dest = tmp / ("with-ledger" if ledger else "without-ledger")
    dest.mkdir(parents=True)
    for name in COPY:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, dest / name)
    config = yaml.safe_load((dest / "config" / "config.yaml").read_text())
    if not ledger:
        config["ledger"] = None
    (dest / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def build(dest: Path, cores: str) -> tuple[float, float]:
    """The wall time of one build from scratch, and the CPU time (user and system) of all its
    processes."""
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    env["PYTHONPATH"] = str(ROOT)
    for folder in ("results", "site", ".snakemake"):
        shutil.rmtree(dest / folder, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [str(BIN / "snakemake"), "--cores", cores],
        cwd=dest,
        env=env,
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def part_ii(tmp: Path, cores: str, repeat: int) -> None:
    with_ledger, without = workspace(tmp, True), workspace(tmp, False)
    on, off, cpu_on, cpu_off = [], [], [], []
    for k in range(repeat):
        for ledger in (False, True) if k % 2 == 0 else (True, False):
            wall, cpu = build(with_ledger if ledger else without, cores)
            (on if ledger else off).append(wall)
            (cpu_on if ledger else cpu_off).append(cpu)
        print(
            f"  round {k + 1}: {on[-1]:.2f} s with the ledger, {off[-1]:.2f} s without "
            f"({100 * (on[-1] / off[-1] - 1):+.1f} %); CPU {cpu_on[-1]:.1f} s and "
            f"{cpu_off[-1]:.1f} s ({100 * (cpu_on[-1] / cpu_off[-1] - 1):+.1f} %)",
            flush=True,
        )
    engine = connect(f"sqlite:///{with_ledger / 'results' / 'ledger.sqlite'}", must_exist=True)
    try:
        rows = counts(engine)
    finally:
        engine.dispose()
    assert not (without / "results" / "ledger.sqlite").exists()
    best_on, best_off = min(on), min(off)
    paired = statistics.median(there / here for there, here in zip(on, off, strict=True))
    print(
        f"(ii) snakemake --cores {cores} on the examples ({rows['run']} runs, {rows['build']} "
        f"builds recorded), {repeat} round(s): the ledger adds "
        f"{100 * (paired - 1):+.1f} % (median of the rounds' ratios, goal ≤ 10 %); "
        f"best builds {best_on:.2f} s with the ledger, {best_off:.2f} s with ledger: null "
        f"({100 * (best_on / best_off - 1):+.1f} %); medians {statistics.median(on):.2f} s and "
        f"{statistics.median(off):.2f} s"
    )
    cpu_paired = statistics.median(
        there / here for there, here in zip(cpu_on, cpu_off, strict=True)
    )
    print(
        f"     CPU time of the build's processes: {statistics.median(cpu_on):.1f} s with the "
        f"ledger, {statistics.median(cpu_off):.1f} s without (medians; the rounds' ratios' "
        f"median {100 * (cpu_paired - 1):+.1f} %)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=200, help="runs timed per example")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="bulk processes")
    parser.add_argument("--repeat-ingest", type=int, default=3, help="best of, for (i)")
    parser.add_argument("--cores", default="2")
    parser.add_argument("--repeat", type=int, default=5, help="rounds, for (ii)")
    parser.add_argument("--skip", default="")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (runs, builds)")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    with tempfile.TemporaryDirectory(prefix="bench-ledger-") as name:
        tmp = Path(args.keep) if args.keep else Path(name)
        tmp.mkdir(parents=True, exist_ok=True)
        if "i" not in skip:
            part_i(tmp, args.runs, args.repeat_ingest, args.jobs)
        if "ii" not in skip:
            part_ii(tmp, args.cores, args.repeat)


if __name__ == "__main__":
    main()
