"""
Several processes embedding one file (torch.distributed, gloo, on the CPU): the same output as
one process, byte for byte; a dying worker stops the run with its error and leaves the finished
chunks for --resume, with any number of processes; what cannot be shared is refused.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

import filelock
import h5py
import numpy
import psutil
import pytest
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin import ElmoEmbedder
# The spawned workers import this module to unpickle the embedders below: it must not import
# AllenNLP's testing module (as the test-case modules do), which makes a temporary directory at
# import that only a test case's teardown removes, so each worker would leave one in /tmp.
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, REPO_ROOT, read_hdf5

LINES = [" ".join(f"w{(i * 3 + j) % 29}" for j in range(1 + (i * 7) % 40)) for i in range(120)]
OPTIONS = dict(chunk_size=10, batch_size=8)


class KilledWorker(ElmoEmbedder):
    """Worker 1 kills itself (SIGKILL) in its third batch; everyone else embeds normally."""

    batches = 0

    def embed_batch_into(self, batch, writer):
        self.batches += 1
        if os.environ.get("RANK") == "1" and self.batches == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        super().embed_batch_into(batch, writer)


class SlowEmbedder(ElmoEmbedder):
    """Embeds as ElmoEmbedder does, a tenth of a second per batch: a run long enough to stop."""

    def embed_batch_into(self, batch, writer):
        time.sleep(0.1)
        super().embed_batch_into(batch, writer)


@pytest.fixture(scope="module")
def single_process_output(tmp_path_factory):
    directory = tmp_path_factory.mktemp("single")
    (directory / "input.txt").write_text("\n".join(LINES) + "\n")
    ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).embed_file(
        str(directory / "input.txt"), str(directory / "out.hdf5"), **OPTIONS)
    return directory / "input.txt", read_hdf5(directory / "out.hdf5")


def assert_identical(path, expected):
    actual = read_hdf5(path)
    assert set(actual) == set(expected)
    for key, value in expected.items():
        if isinstance(value, numpy.ndarray):
            assert numpy.array_equal(actual[key], value), key
        else:
            assert actual[key] == value, key


def test_the_workers_import_no_module_that_leaves_a_directory_behind():
    # What a spawned worker imports to unpickle this module's embedders (see the imports).
    check = "import sys, tests.inference.test_workers; print('allennlp.common.testing' in sys.modules)"
    completed = subprocess.run([sys.executable, "-c", check], cwd=REPO_ROOT, capture_output=True, text=True)
    assert completed.stdout.strip() == "False", completed.stderr[-3000:]


def test_two_workers_write_what_one_process_writes(single_process_output, tmp_path):
    input_path, expected = single_process_output
    ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).embed_file(
        str(input_path), str(tmp_path / "out.hdf5"), num_workers=2, **OPTIONS)
    assert_identical(tmp_path / "out.hdf5", expected)
    assert sorted(os.listdir(tmp_path)) == ["out.hdf5"]


def test_a_dying_worker_stops_the_run_and_resume_finishes_it_with_any_number(single_process_output, tmp_path):
    input_path, expected = single_process_output
    output = str(tmp_path / "out.hdf5")
    with pytest.raises(RuntimeError, match=r"worker 1 of 2 died \(signal SIGKILL\).*out.hdf5.partial.*--resume"):
        KilledWorker(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).embed_file(str(input_path), output, num_workers=2, **OPTIONS)
    assert not os.path.exists(output)
    finished = [name for name in os.listdir(output + ".partial") if name.startswith("chunk_")]
    assert finished  # worker 0's chunks at least (and worker 1's first two)
    # One process finishes what two started: the chunks do not depend on who embeds them.
    ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).embed_file(str(input_path), output, resume=True, **OPTIONS)
    assert_identical(output, expected)


def test_what_the_workers_cannot_share_is_refused(single_process_output, tmp_path, monkeypatch):
    input_path, _ = single_process_output
    # Where torch puts each worker's traceback file (the system's temporary directory).
    temporary = tmp_path / "temporary"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    stateful = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=True)
    with pytest.raises(ConfigurationError, match="stateful mode: the carried state runs through the file in order"):
        stateful.embed_file(str(input_path), str(tmp_path / "out.hdf5"), num_workers=2)
    embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    with pytest.raises(ConfigurationError, match="num_workers must be positive"):
        embedder.embed_file(str(input_path), str(tmp_path / "out.hdf5"), num_workers=0)
    # A bad input found by the first worker is one error, here, before any work.
    blank = tmp_path / "blank.txt"
    blank.write_text("one\n\nthree\n")
    with pytest.raises(ConfigurationError, match=r"blank.txt has blank lines \(line 2\)"):
        embedder.embed_file(str(blank), str(tmp_path / "out.hdf5"), num_workers=2)
    with filelock.FileLock(str(tmp_path / "out.hdf5") + ".lock"):
        with pytest.raises(ConfigurationError, match="Another process is writing"):
            embedder.embed_file(str(input_path), str(tmp_path / "out.hdf5"), num_workers=2)
    assert not (tmp_path / "out.hdf5.partial").exists()
    assert os.listdir(temporary) == []  # the workers' traceback files too


def test_workers_compute_with_the_embedder_given_even_changed_after_loading(single_process_output, tmp_path):
    input_path, expected = single_process_output
    embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    with torch.no_grad():
        next(embedder.elmo_bilm.parameters()).mul_(0.5)
    embedder.embed_file(str(input_path), str(tmp_path / "one.hdf5"), **OPTIONS)
    embedder.embed_file(str(input_path), str(tmp_path / "two.hdf5"), num_workers=2, **OPTIONS)
    changed = read_hdf5(tmp_path / "one.hdf5")
    assert_identical(tmp_path / "two.hdf5", changed)
    assert not numpy.array_equal(changed["0"], expected["0"])


def test_torchrun_launches_the_command_line(single_process_output, tmp_path):
    input_path, expected = single_process_output
    completed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "elmo_plugin", "elmo",
         str(input_path), str(tmp_path / "out.hdf5"), "--all", "--deterministic",
         "--options-file", ELMO_OPTIONS_FILE, "--weight-file", ELMO_WEIGHT_FILE,
         "--chunk-size", str(OPTIONS["chunk_size"]), "--batch-size", str(OPTIONS["batch_size"])],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        # torchrun's agent leaves its log directory behind: here, not in the system's /tmp
        env=dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp_path)),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert_identical(tmp_path / "out.hdf5", expected)
    with h5py.File(tmp_path / "out.hdf5", "r") as handle:
        assert "sentence_to_index" in handle


def test_too_few_chunks_for_the_workers_are_named(caplog):
    from elmo_plugin.inference.embed_file import _Plan, _warn_if_few_chunks

    fresh = _Plan(batch_size=None, chunk_size=4096, num_chunks=5, done_chunks=frozenset(), num_lines=20000, num_tokens=0, identity=(),
                  chunk_sha256=(), input_size=0)
    _warn_if_few_chunks(fresh, 1)
    _warn_if_few_chunks(fresh, 2)  # 5 chunks for 2 processes: enough
    assert not caplog.records
    resumed = _Plan(batch_size=None, chunk_size=4096, num_chunks=5, done_chunks=frozenset({0, 1}), num_lines=20000, num_tokens=0,
                    identity=(), chunk_sha256=(), input_size=0)
    _warn_if_few_chunks(resumed, 2)  # only the 3 unfinished ones count
    assert "3 chunks to embed for 2 processes" in caplog.text and "--chunk-size (now 4096 lines)" in caplog.text


# `allennlp elmo --num-workers 2` with SlowEmbedder in place of ElmoEmbedder.
# Ctrl-C as in a terminal: started from a background job (CI under `nohup ... &`), the
# interpreter would inherit SIGINT ignored and never see the test's signal.
SLOW_COMMAND = """
import signal
import sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from allennlp.commands import main
from allennlp.common.util import install_sigterm_handler
import elmo_plugin.commands.elmo
from tests.inference.test_workers import SlowEmbedder
elmo_plugin.commands.elmo.ElmoEmbedder = SlowEmbedder
install_sigterm_handler()
main(prog="allennlp")
"""


def start_slow_command(input_path, output):
    """`allennlp elmo` with two workers of `SlowEmbedder`, once a worker has finished a chunk:
    the command's process and its two workers."""
    child = subprocess.Popen(
        [sys.executable, "-c", SLOW_COMMAND, "elmo", str(input_path), str(output), "--all", "--deterministic",
         "--num-workers", "2", "--options-file", ELMO_OPTIONS_FILE, "--weight-file", ELMO_WEIGHT_FILE,
         "--chunk-size", str(OPTIONS["chunk_size"]), "--batch-size", str(OPTIONS["batch_size"])],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    partial = output.parent / (output.name + ".partial")
    deadline = time.monotonic() + 120
    while not (partial.is_dir() and any(name.startswith("chunk_") for name in os.listdir(partial))):
        assert child.poll() is None, child.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # The spawned workers (not the resource tracker, which leaves when its parent has gone).
    workers = [p for p in psutil.Process(child.pid).children(recursive=True) if "spawn_main" in " ".join(p.cmdline())]
    assert len(workers) == 2
    return child, workers


def assert_resumable(input_path, output, expected, workers):
    """No worker left, no output, nobody holding its lock, and --resume completes it."""
    assert not [worker.pid for worker in workers if worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE]
    filelock.FileLock(str(output) + ".lock").acquire(timeout=0)
    assert not output.exists()
    ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).embed_file(str(input_path), str(output), resume=True, **OPTIONS)
    assert_identical(output, expected)


@pytest.mark.parametrize("signal_number, exit_code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stopping_the_command_stops_every_worker_and_leaves_a_resumable_run(
    single_process_output, tmp_path, signal_number, exit_code
):
    input_path, expected = single_process_output
    output = tmp_path / "out.hdf5"
    child, workers = start_slow_command(input_path, output)
    child.send_signal(signal_number)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == exit_code, stderr[-3000:]
    assert "run the same command with --resume" in stderr.strip().splitlines()[-1]
    assert_resumable(input_path, output, expected, workers)


def test_workers_stop_when_the_command_is_killed_outright(single_process_output, tmp_path):
    # kill -9 or the out-of-memory killer: the command cannot stop its workers itself.
    input_path, expected = single_process_output
    output = tmp_path / "out.hdf5"
    child, workers = start_slow_command(input_path, output)
    child.kill()
    child.communicate(timeout=120)
    _, alive = psutil.wait_procs(workers, timeout=60)
    assert not alive, [worker.pid for worker in alive]
    assert_resumable(input_path, output, expected, workers)


def test_more_workers_than_cores_are_warned_about_before_they_start(monkeypatch, caplog):
    from elmo_plugin.inference import workers

    monkeypatch.setattr(workers.os, "cpu_count", lambda: 2)

    def no_processes(*args, **kwargs):
        raise RuntimeError("not started")

    monkeypatch.setattr(workers.torch.multiprocessing, "start_processes", no_processes)
    with pytest.raises(RuntimeError, match="not started"):
        workers.spawn_workers(lambda embedder: None, None, 12, "out.hdf5")
    assert "12 workers on 2 CPU cores" in caplog.text


def test_more_workers_than_gpus_are_warned_about(monkeypatch, caplog):
    from elmo_plugin.inference import workers

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    workers.warn_if_gpus_shared(torch.device("cuda", 0), 2)
    workers.warn_if_gpus_shared(torch.device("cpu"), 8)
    assert "GPU" not in caplog.text
    workers.warn_if_gpus_shared(torch.device("cuda", 1), 4)
    assert "4 workers on 2 GPU(s): several share a GPU" in caplog.text and "--num-workers 2" in caplog.text


def test_two_workers_write_float16_gzip_as_one_process_does(single_process_output, tmp_path):
    input_path, _ = single_process_output
    small = dict(OPTIONS, dtype="float16", compression="gzip")
    ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).embed_file(str(input_path), str(tmp_path / "one.hdf5"), **small)
    ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).embed_file(
        str(input_path), str(tmp_path / "two.hdf5"), num_workers=2, **small)
    assert_identical(tmp_path / "two.hdf5", read_hdf5(tmp_path / "one.hdf5"))
    with h5py.File(tmp_path / "two.hdf5", "r") as handle:
        assert handle["0"].dtype == numpy.float16 and handle["0"].compression == "gzip"


def test_each_process_computes_on_its_own_gpu_round_the_machines_gpus(monkeypatch):
    from elmo_plugin.inference import workers

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    cuda = torch.device("cuda", 0)
    assert workers.device_of_this_process(cuda) == cuda  # a single process stays
    monkeypatch.setattr(workers, "rank_and_world", lambda: (3, 4))
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert workers.device_of_this_process(cuda) == torch.device("cuda", 1)  # (0 + 3) % 2
    assert workers.device_of_this_process(torch.device("cuda", 1)) == cuda
    monkeypatch.setenv("LOCAL_RANK", "0")  # torchrun across machines: the rank on this one
    assert workers.device_of_this_process(torch.device("cuda", 1)) == torch.device("cuda", 1)
    assert workers.device_of_this_process(torch.device("cpu")) == torch.device("cpu")
