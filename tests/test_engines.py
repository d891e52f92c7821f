"""Fan-out engines (issue 14): the driver loop, retries, dead workers, the local and Ray engines
giving identical results, resume after an interrupted driver, and the missing-extra error.

The Ray tests start one private local Ray instance (module fixture, 2 CPUs) and are skipped
with a reason where Ray is not installed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fusionplan.app import grid as grid_module
from fusionplan.app.grid import GRID_FIELDS, Grid, run_grid
from fusionplan.app.pipeline import PlanRequest
from fusionplan.data import dataset as ds
from fusionplan.engines import (
    WORKER_DIED,
    LocalEngine,
    Outcome,
    make_engine,
    run_tasks,
    tasks_per_node,
)
from fusionplan.engines.scaling import JobTiming, lpt_makespan, project, serial_fraction
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.onnx_import import load_model
from tests.dataset_models import TINY_BUFFERS_KB, save_tiny

try:
    import ray
except ImportError:  # the optional extra
    ray = None

needs_ray = pytest.mark.skipif(ray is None, reason="Ray is an optional extra: fusionplan[ray]")


# ---------------------------------------------------------------- task functions (importable)
def square_plus(item: int, shared: int) -> int:
    return item * item + shared


def flaky(item: tuple[str, int], shared: None) -> int:
    """Fails until it has been called ``fails`` times for this marker directory."""
    marker, fails = item
    calls = len(os.listdir(marker))
    Path(marker, f"call{calls}").touch()
    if calls < fails:
        raise RuntimeError(f"transient failure {calls}")
    return calls


def bad_input(item: int, shared: None) -> int:
    raise ConfigError("bad input never gets better")


def die_once(item: tuple[str, int], shared: None) -> int:
    """Kills its own worker process the first time it runs for this marker."""
    marker, value = item
    if not os.path.exists(marker):
        Path(marker).touch()
        os._exit(17)
    return value


def always_die(item: int, shared: None) -> int:
    os._exit(9)


def die_if_negative(item: int, shared: None) -> int:
    if item < 0:
        os._exit(3)
    return item


def tell_pid_and_sleep(item: str, shared: None) -> int:
    Path(item).write_text(str(os.getpid()))
    time.sleep(120)
    return 0


DRIVER = (
    "import sys\n"
    "from fusionplan.engines import LocalEngine, run_tasks\n"
    "from tests.test_engines import tell_pid_and_sleep\n"
    "list(run_tasks(LocalEngine(2), tell_pid_and_sleep, [sys.argv[1]]))\n"
)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"  # a zombie has exited; its new parent reaps it when it will


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_workers_exit_when_their_driver_is_killed(tmp_path):
    """Killing a fan-out command leaves no worker computing for nobody."""
    marker = tmp_path / "pid"
    root = Path(__file__).resolve().parents[1]
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(marker)], cwd=root)
    try:
        deadline = time.monotonic() + 90
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
        worker = int(marker.read_text())
        assert _running(worker)
    finally:
        driver.kill()
        driver.wait()
    deadline = time.monotonic() + 10
    while _running(worker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _running(worker)


# ---------------------------------------------------------------- the driver loop, inline
def test_run_tasks_returns_every_value_with_the_shared_input():
    outcomes = list(run_tasks(LocalEngine(1), square_plus, [1, 2, 3], shared=10))
    assert sorted((o.index, o.value) for o in outcomes) == [(0, 11), (1, 14), (2, 19)]
    assert all(o.ok and o.attempts == 1 and o.node == socket.gethostname() for o in outcomes)
    assert all(isinstance(o.seconds, float) and o.seconds >= 0 for o in outcomes)


def test_a_failing_task_is_retried_then_reported(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    items = [(str(tmp_path / "a"), 2), (str(tmp_path / "b"), 5)]
    outcomes = {o.index: o for o in run_tasks(LocalEngine(1), flaky, items, retries=2)}
    assert outcomes[0].ok and outcomes[0].value == 2 and outcomes[0].attempts == 3
    assert not outcomes[1].ok and outcomes[1].attempts == 3
    assert "RuntimeError: transient failure 2" in outcomes[1].error


def test_bad_input_is_not_retried():
    (outcome,) = run_tasks(LocalEngine(1), bad_input, [1], retries=3)
    assert outcome.attempts == 1 and outcome.error == "bad input never gets better"


def test_tasks_per_node_counts_runs_and_failures():
    outcomes = [
        Outcome(0, 1, None, "a", 1, 0.1),
        Outcome(1, None, "x", "a", 3, 0.1),
        Outcome(2, 1, None, "b", 1, 0.1),
    ]
    assert tasks_per_node(outcomes) == "tasks per node: a 2 (1 failed), b 1"


def test_engine_options_are_checked():
    with pytest.raises(ConfigError, match="--address is for the ray engine"):
        make_engine("local", address="auto")
    with pytest.raises(ConfigError, match="processes"):
        make_engine("local", processes=0)
    with pytest.raises(ConfigError, match="unknown engine"):
        make_engine("spark")
    with pytest.raises(ConfigError, match="retries"):
        list(run_tasks(LocalEngine(1), square_plus, [1], retries=-1))


def test_missing_ray_is_a_one_line_error_naming_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'fusionplan\[ray\]'"):
        make_engine("ray")


def test_cli_reports_the_missing_extra_on_one_line(monkeypatch, tmp_path, capsys):
    from fusionplan.app.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(SystemExit) as info:
        main(["sweep", "squeezenet", "--engine", "ray", "--out", str(tmp_path / "g"), "-q"])
    assert info.value.code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fusionplan[ray]" in err[0]


# ---------------------------------------------------------------- worker processes
def test_a_dead_local_worker_is_replaced_and_its_task_retried(tmp_path):
    items = [(str(tmp_path / f"m{i}"), i) for i in range(3)]
    outcomes = list(run_tasks(LocalEngine(2), die_once, items, retries=1))
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    assert sorted(o.value for o in outcomes) == [0, 1, 2]
    assert max(o.attempts for o in outcomes) == 2  # each task's own death is one try


def test_only_the_task_that_kills_its_worker_is_charged():
    items = [1, -1, 2, 3, 4]
    outcomes = {o.index: o for o in run_tasks(LocalEngine(2), die_if_negative, items, retries=0)}
    assert outcomes[1].error == WORKER_DIED and outcomes[1].attempts == 1
    assert all(outcomes[i].ok and outcomes[i].value == items[i] for i in (0, 2, 3, 4))


def test_a_worker_that_always_dies_is_reported_not_dropped():
    (outcome,) = run_tasks(LocalEngine(1, isolate=True), always_die, [1], retries=1)
    assert not outcome.ok and outcome.error == WORKER_DIED and outcome.attempts == 2


# ---------------------------------------------------------------- jobs: local vs Ray
@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("engine-models")
    return (save_tiny(d, "tiny_a"), save_tiny(d, "tiny_b", seed=1, width=12, hw=24, blocks=4))


def _dataset(out, models, engine, **kw):
    a, b = models
    return ds.generate_dataset(
        out, seed=5, groups=120, unseen_groups=40, models=[a], unseen_models=[b],
        buffers_kb=TINY_BUFFERS_KB, engine=engine, **kw,
    )  # fmt: skip


def _shard_bytes(out, manifest):
    return {s["file"]: (out / s["file"]).read_bytes() for s in manifest["shards"]}


def _grid(models) -> Grid:
    requests = tuple(
        PlanRequest(buffer=f"{kb}KB", scheme="lbdf", search="ls", budget=30, seed=1)
        for kb in TINY_BUFFERS_KB[:3]
    )
    return Grid(tuple(str(m) for m in models), ("lbdf", "brr"), requests)


@pytest.fixture(scope="module")
def ray_engine():
    if ray is None:
        pytest.skip("Ray is an optional extra: fusionplan[ray]")
    engine = make_engine("ray", processes=2)
    root = str(Path(__file__).resolve().parent.parent)  # workers import this test module
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": root}},
    )
    yield engine
    ray.shutdown()


@needs_ray
def test_ray_dataset_shards_are_byte_identical_to_local(tmp_path, tiny_models, ray_engine):
    local = _dataset(tmp_path / "local", tiny_models, LocalEngine(1))
    remote = _dataset(tmp_path / "ray", tiny_models, ray_engine)
    assert remote["content_sha256"] == local["content_sha256"]
    assert _shard_bytes(tmp_path / "ray", remote) == _shard_bytes(tmp_path / "local", local)
    assert remote["tasks_per_node"].startswith("tasks per node: ")


@needs_ray
def test_ray_sweep_grid_equals_local(tmp_path, tiny_models, ray_engine):
    grid = _grid(tiny_models)
    local, _ = run_grid(grid, load_model, engine=LocalEngine(1))
    pooled, _ = run_grid(grid, load_model, engine=LocalEngine(2))
    remote, outcomes = run_grid(grid, load_model, engine=ray_engine)
    assert remote == local == pooled and len(outcomes) == 4
    assert all(o.node and o.seconds > 0 for o in outcomes)
    assert not any(r["error"] for r in local)
    for model in grid.models:  # warm-started: no curve rises with the buffer
        for scheme in grid.schemes:
            curve = [r["dram_mb"] for r in local if r["model"] == model and r["scheme"] == scheme]
            assert curve == sorted(curve, reverse=True)


@needs_ray
def test_ray_sweep_with_the_default_search_equals_local(tiny_models, ray_engine):
    """auto stops on work units, not seconds: a slower or busier worker gets the same plan,
    and the rows (and so the CSV) are the same on either engine."""
    requests = tuple(
        PlanRequest(buffer=f"{kb}KB", scheme="brr", effort=2e-4) for kb in TINY_BUFFERS_KB[:3]
    )
    grid = Grid(tuple(str(m) for m in tiny_models), ("lbdf", "brr"), requests)
    local, _ = run_grid(grid, load_model, engine=LocalEngine(1))
    remote, _ = run_grid(grid, load_model, engine=ray_engine)
    assert remote == local and not any(r["error"] for r in local)
    assert any(r["bound_method"] == "A* bound" for r in local)  # the work limit did bind
    assert list(local[0]) == list(GRID_FIELDS)


@needs_ray
def test_a_dead_ray_worker_is_retried(tmp_path, ray_engine):
    items = [(str(tmp_path / f"r{i}"), i) for i in range(2)]
    outcomes = list(run_tasks(ray_engine, die_once, items, retries=2))
    assert sorted(o.value for o in outcomes) == [0, 1]
    assert all(o.attempts == 2 for o in outcomes)


@needs_ray
def test_an_interrupted_ray_job_resumes_with_only_the_missing_shards(
    tmp_path, tiny_models, ray_engine
):
    out = tmp_path / "resume"
    reference = _dataset(tmp_path / "ref", tiny_models, LocalEngine(1))
    seen = []

    def stop_after_two(done, total):
        seen.append(done)
        if len(seen) == 3:  # the initial call, then two finished shards
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _dataset(out, tiny_models, ray_engine, progress=stop_after_two)
    again = _dataset(out, tiny_models, ray_engine)
    assert again["shards_built"] == len(reference["shards"]) - 2
    assert again["content_sha256"] == reference["content_sha256"]


def test_an_interrupted_grid_resumes_and_a_failed_task_is_a_row(tmp_path, tiny_models, monkeypatch):
    grid = _grid(tiny_models)
    out = tmp_path / "grid"
    real = grid_module.sweep_graph
    broken = str(tiny_models[1])

    def crash_on_one_model(graph, requests):
        if graph.name == load_model(broken).name:
            raise RuntimeError("this sweep crashed")
        return real(graph, requests)

    monkeypatch.setattr(grid_module, "sweep_graph", crash_on_one_model)
    rows, outcomes = run_grid(grid, load_model, out_dir=out)
    assert len(outcomes) == 4 and sum(not o.ok and o.attempts == 3 for o in outcomes) == 2
    failed = [r for r in rows if r["error"]]
    assert len(failed) == 6 and {r["model"] for r in failed} == {broken}
    assert all("this sweep crashed" in r["error"] for r in failed)

    monkeypatch.setattr(grid_module, "sweep_graph", real)
    again, outcomes = run_grid(grid, load_model, out_dir=out)
    assert len(outcomes) == 2 and all(o.ok for o in outcomes)  # only the failed ones reran
    assert not any(r["error"] for r in again)
    full, outcomes = run_grid(grid, load_model, out_dir=out)
    assert full == again and outcomes == []  # everything reused, nothing run
    other = Grid(grid.models, grid.schemes, grid.requests, load_options="other")
    assert len(run_grid(other, load_model, out_dir=out)[1]) == 4  # other settings: no reuse


# ---------------------------------------------------------------- scaling projections
def test_lpt_makespan_and_projection_by_hand():
    tasks = [5.0, 4.0, 3.0, 3.0, 3.0]
    # longest first onto the least loaded of two cores: 5 | 4, 4+3, 5+3, 7+3
    assert lpt_makespan(tasks, 2) == 10.0
    assert lpt_makespan(tasks, 64) == 5.0
    one, two, many = project(tasks, 2.0, [1, 2, 64])
    assert one.wall_s == 20.0 and one.speedup == 1.0 and two.wall_s == 12.0
    assert many.wall_s == 7.0 and many.bound == "longest task"
    assert serial_fraction(tasks, 2.0) == pytest.approx(2.0 / 20.0)
    big = JobTiming("job", tuple(tasks), setup_s=1.0, driver_s=2.0).scaled(10)
    assert big.task_seconds == (50.0, 40.0, 30.0, 30.0, 30.0) and big.driver_s == 11.0


def test_bench_scaling_reads_a_dataset_manifest(tmp_path, tiny_models):
    from click.testing import CliRunner

    from fusionplan.app.cli import cli

    manifest = _dataset(tmp_path / "d", tiny_models, LocalEngine(1))
    assert set(manifest["timing"]["task_seconds"]) == {s["file"] for s in manifest["shards"]}
    result = CliRunner().invoke(cli, ["bench", "scaling", str(tmp_path / "d"), "--cores", "1,4"])
    assert result.exit_code == 0, result.output
    assert f"{len(manifest['shards'])} tasks" in result.output and "| 4 |" in result.output
    bad = CliRunner().invoke(cli, ["bench", "scaling", str(tmp_path)])
    assert isinstance(bad.exception, ConfigError) and "neither a dataset" in str(bad.exception)
