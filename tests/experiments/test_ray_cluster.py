"""``crasp sweep --ray-address`` on a real Ray cluster of two nodes on one machine.

A head node that offers no CPU to tasks (so every run goes to the other node) and a
worker node, each started with ``ray start`` in its own session (stopped by killing that
session, so other Ray instances on the machine are left alone). The runs write their
directories to ``storage``, a folder the driver never reads: every run's results reach
the driver's ``out`` and ``results`` through Ray (``out`` holds only the ``results.json``
the driver wrote). A worker that dies in its first attempt (the run's generator exits the
process once) is run again under ``max_retries = 1``, and with ``max_retries = 0`` the
run fails, is reported, and leaves no record. Skipped where Ray is not installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]
RAY = shutil.which("ray") or str(Path(sys.executable).parent / "ray")
# no telemetry; no token authentication (Ray 2.5x turns it on where a token file exists in
# the home folder, and then its own second node is refused)
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
PROGRAM = 'A = # "a" > # "b"\n'
GENERATOR = """
import os

MARKER = {marker!r}


def crash_once(rng, length):
    # the first call anywhere ends its process, as a killed worker would
    if not os.path.exists(MARKER):
        open(MARKER, "w").close()
        os._exit(1)
    return [str(s) for s in rng.choice(["a", "b"], size=length)]
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``ray start ... --block`` in a session of its own (its processes stop with it)."""
    return subprocess.Popen(
        [RAY, "start", "--block", "--disable-usage-stats", *args],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


CLIENT_PORT: dict[str, int] = {}  # the head's Ray Client port, once it is started


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The address of a two-node cluster: a head without CPUs (and a Ray Client server),
    a worker with two."""
    port = _free_port()
    CLIENT_PORT["port"] = client = _free_port()
    temp = tempfile.mkdtemp(prefix="crasp-ray-")  # short: Ray's socket paths are limited
    env = ENV
    head = _start(
        [
            "--head",
            f"--port={port}",
            "--num-cpus=0",
            f"--ray-client-server-port={client}",
            f"--temp-dir={temp}",
            "--include-dashboard=false",
        ],
        env,
    )
    nodes = [head]
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        worker = None
        while time.monotonic() < deadline:
            if head.poll() is not None:
                pytest.fail("the Ray head node did not start")
            if worker is None:
                probe = subprocess.run(
                    [RAY, "status", f"--address={address}"], capture_output=True, env=env
                )
                if probe.returncode == 0:
                    worker = _start([f"--address={address}", "--num-cpus=2"], env)
                    nodes.append(worker)
            else:
                status = subprocess.run(
                    [RAY, "status", f"--address={address}"], capture_output=True, text=True, env=env
                )
                if " 2.0 CPU" in status.stdout or "0.0/2.0 CPU" in status.stdout:
                    break
            time.sleep(1)
        else:
            pytest.fail("the two Ray nodes did not come up within 90 s")
        yield address
    finally:
        for node in reversed(nodes):
            _stop(node)
        shutil.rmtree(temp, ignore_errors=True)


def _grid(tmp_path: Path, retries: int, seeds: list[int]) -> Path:
    (tmp_path / "prog.cr").write_text(PROGRAM)
    marker = tmp_path / "crashed-once"
    (tmp_path / "gens.py").write_text(GENERATOR.format(marker=str(marker)))
    path = tmp_path / "grid.toml"
    path.write_text(
        "\n".join(
            [
                'out = "runs"',
                'results = "records"',
                f'storage = "{tmp_path / "storage"}"',
                f"max_retries = {retries}",
                "[base]",
                'program = "prog.cr"',
                'generator = "gens.py:crash_once"',
                "lengths = [1, 6]",
                "bins = [[1, 6], [7, 10]]",
                "steps = 4",
                "eval_every = 4",
                "test_size = 4",
                "d_model = 16",
                "n_layers = 1",
                "n_heads = 1",
                'device = "cpu"',
                "[grid]",
                f"seed = {seeds}",
                "",
            ]
        )
    )
    return path


def _sweep(grid: Path, address: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from crasp_compiler.cli import main; main()"]
    return subprocess.run(
        [*command, "sweep", str(grid), "--ray-address", address, "--no-bar"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=ENV,
    )


def test_runs_on_the_worker_node_come_back_through_ray_and_a_killed_worker_is_retried(
    cluster, tmp_path
):
    grid = _grid(tmp_path, retries=1, seeds=[0, 1, 2])
    done = _sweep(grid, cluster)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "crashed-once").exists()  # one worker died, and its run was retried
    records = sorted((tmp_path / "records").glob("*.json"))
    assert len(records) == 3
    for record in records:
        data = json.loads(record.read_text())
        assert data["steps"] == 4 and "out_dir" not in data["config"]
        name = record.stem
        # the driver wrote only the returned results under out; the node wrote the rest
        # to storage, which the driver never reads
        assert sorted(p.name for p in (tmp_path / "runs" / name).iterdir()) == ["results.json"]
        stored = tmp_path / "storage" / name
        assert {"model.safetensors", "config.json", "results.json"} <= {
            p.name for p in stored.iterdir()
        }
        assert data["provenance"]["device"] == "cpu"
    # a second sweep trains nothing: every run has its record
    again = _sweep(grid, cluster)
    assert again.returncode == 0 and "3 finished earlier, 0 to train" in again.stderr


def test_without_retries_a_killed_worker_fails_its_run_and_leaves_no_record(cluster, tmp_path):
    grid = _grid(tmp_path, retries=0, seeds=[0])
    done = _sweep(grid, cluster)
    assert done.returncode == 1
    assert "failed:" in done.stderr and "Traceback" not in done.stderr
    assert not list((tmp_path / "records").glob("*.json"))
    assert not list((tmp_path / "runs").glob("*/results.json"))


def test_a_ray_client_address_runs_the_sweep_through_the_client(cluster, tmp_path):
    """``ray://`` (the ``ray`` extra brings the client): the driver talks to the cluster
    through the head's Ray Client server, and the results still come back."""
    grid = _grid(tmp_path, retries=1, seeds=[0])
    (tmp_path / "crashed-once").touch()  # no crash here
    address = f"ray://127.0.0.1:{CLIENT_PORT['port']}"
    # the head starts a server process per client: wait (up to 3 minutes on a busy
    # machine) until a client connects, so that the sweep does not race that start
    probe = "import ray, sys; ray.init(sys.argv[1]); ray.shutdown()"
    deadline = time.monotonic() + 180
    while True:
        ready = subprocess.run(
            [sys.executable, "-c", probe, address], capture_output=True, env=ENV, timeout=180
        )
        if ready.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert ready.returncode == 0, ready.stderr.decode()[-2000:]
    done = _sweep(grid, address)
    assert done.returncode == 0, done.stderr
    [record] = (tmp_path / "records").glob("*.json")
    assert json.loads(record.read_text())["steps"] == 4
