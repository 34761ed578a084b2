"""
The float32 kernel chosen on the machine: the fastest eligible candidate per product class,
the accuracy rule, the machine's cache, the switch, and the biLM's outputs whichever kernel
wins (the oracle's float32 bound and the TensorFlow fixture).
"""
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from elmo_plugin import ElmoBiLm, batch_to_ids
from elmo_plugin.kernels import choice, mkl_packed, onednn
from elmo_plugin.kernels.products import Kernels, Role
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE
from tests.modules.oracle import check_bilm_equals_allennlp, check_top_layer_matches_tensorflow

needs_both = pytest.mark.skipif(not (onednn.available() and mkl_packed.available()), reason="needs oneDNN and MKL")


def winning(monkeypatch, winner):
    """Timings in which `winner` is fastest; returns the candidates' names as they are timed."""
    timed = []

    def fake_timed_in_turns(candidates, turns):
        timed.extend(candidates)
        return {label: 0.0 if label == winner else 1.0 for label in candidates}

    monkeypatch.setattr(choice, "timed_in_turns", fake_timed_in_turns)
    return timed


@needs_both
@pytest.mark.parametrize("winner", ["mkl", "onednn"])
def test_the_fastest_is_used_cached_for_the_machine_and_logged_once(measuring, monkeypatch, caplog, winner):
    timed = winning(monkeypatch, winner)
    layer = torch.nn.Linear(16, 64)
    inputs = torch.randn(20, 16)
    with torch.no_grad(), caplog.at_level(logging.INFO, logger=choice.__name__):
        first = Kernels().product(Role.LSTM_INPUT, layer)(inputs)
        again = Kernels().product(Role.LSTM_INPUT, layer)(inputs)
    assert len(timed) == 2  # both candidates, timed once
    torch.testing.assert_close(first, layer(inputs), rtol=0, atol=1e-6)
    assert torch.equal(first, again)
    messages = [r.getMessage() for r in caplog.records if r.name == choice.__name__]
    assert len(messages) == 1 and f"lstm input 64x16 rows<=64 from mkl/onednn: {winner}, measured on this CPU" in messages[0]
    cache = json.loads(measuring.read_text())
    assert cache == {choice.cpu_identity(): {"lstm input 64x16 rows<=64 from mkl/onednn": winner}}
    # Another process of the machine (no decision of its own yet) reads it, measuring nothing.
    choice.forget_decisions()
    timed.clear()
    with torch.no_grad(), caplog.at_level(logging.INFO, logger=choice.__name__):
        Kernels().product(Role.LSTM_INPUT, layer)(inputs)
    assert not timed and "decided before on this CPU" in caplog.records[-1].getMessage()
    # Another row class is another decision.
    with torch.no_grad():
        Kernels().product(Role.LSTM_INPUT, layer)(torch.randn(1000, 16))
    assert "lstm input 64x16 rows<=many from mkl/onednn" in json.loads(measuring.read_text())[choice.cpu_identity()]


def test_a_candidate_less_accurate_than_the_rule_allows_is_never_chosen(measuring, monkeypatch):
    weight, bias = torch.randn(64, 256), torch.randn(64)

    def sloppy(inputs):
        return torch.nn.functional.linear(inputs, weight, bias) + 1e-3

    def exact(inputs):
        return torch.nn.functional.linear(inputs, weight, bias)

    winning(monkeypatch, "onednn")
    candidates = {"mkl": exact, "onednn": sloppy}
    assert choice.chosen(("highway", (64, 256), "64"), candidates, torch.randn(30, 256), weight, bias) == "mkl"


@needs_both
def test_a_fixed_choice_measures_nothing(measuring, monkeypatch):
    timed = winning(monkeypatch, "mkl")
    choice.set_mode(choice.FIXED)
    with torch.no_grad():
        Kernels().product(Role.HIGHWAY, torch.nn.Linear(8, 16))(torch.randn(4, 8))
    assert not timed and not measuring.exists()


def test_the_switch_names_what_it_accepts(monkeypatch):
    monkeypatch.setenv(choice.ENVIRONMENT_VARIABLE, "fastest")
    with pytest.raises(ValueError, match="ELMO_PLUGIN_KERNEL_CHOICE='fastest': expected one of"):
        choice.mode()
    monkeypatch.setenv(choice.ENVIRONMENT_VARIABLE, "Fixed")
    assert choice.mode() == choice.FIXED


def test_an_unusable_cache_still_chooses_and_says_so(measuring, monkeypatch, tmp_path, caplog):
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("")
    monkeypatch.setattr(choice, "CACHE_PATH", blocker / "kernel_choice.json")
    weight = torch.randn(8, 4)
    with caplog.at_level(logging.WARNING, logger=choice.__name__):
        decided = choice.chosen(("highway", (8, 4), "8"), {"mkl": lambda x: x @ weight.T}, torch.randn(3, 4), weight, None)
    assert decided == "mkl"
    assert "cannot be used" in caplog.text and "other processes may choose differently" in caplog.text



def test_a_cache_write_that_fails_leaves_the_cache_as_it_was(measuring, monkeypatch, caplog):
    weight = torch.randn(8, 4)
    candidates = {"mkl": lambda x: x @ weight.T}
    choice.chosen(("highway", (8, 4), "8"), candidates, torch.randn(3, 4), weight, None)
    before = measuring.read_text()

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with caplog.at_level(logging.WARNING, logger=choice.__name__):
        decided = choice.chosen(("projection", (8, 4), "8"), candidates, torch.randn(3, 4), weight, None)
    assert decided == "mkl"
    assert "cannot be used" in caplog.text
    assert measuring.read_text() == before
    assert not [name for name in os.listdir(measuring.parent) if name.startswith(".")]  # no temporary file


@needs_both
@pytest.mark.parametrize("winner", ["mkl", "onednn", "mkl_packed"])
def test_the_bilm_stays_within_the_oracles_bound_whichever_kernel_wins(measuring, monkeypatch, winner):
    # mkl_packed is a candidate for one-row recurrent products only; elsewhere mkl or oneDNN win.
    winning(monkeypatch, winner)
    check_top_layer_matches_tensorflow(torch.device("cpu"))
    check_bilm_equals_allennlp(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, torch.device("cpu"))
    bilm = ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False)
    with torch.no_grad():
        alone = bilm(batch_to_ids([["The", "bats", "hang", "."]]))["activations"][2][0]
        batched = bilm(batch_to_ids([["The", "bats", "hang", "."], ["x"] * 9]))["activations"][2][0, :6]
    torch.testing.assert_close(alone, batched, rtol=0, atol=1e-6)
    decided = json.loads(measuring.read_text())[choice.cpu_identity()]
    assert decided["lstm recurrent 256x16 rows<=1 from mkl/mkl_packed/onednn"] == winner


def test_ways_of_running_work_are_timed_in_turns_and_the_least_time_of_each_counts(monkeypatch):
    # Turns a, b, a, b, a, b taking 3, 2, 1, 4, 2, 5 seconds: a at best 1, b at best 2.
    durations = [3.0, 2.0, 1.0, 4.0, 2.0, 5.0]
    readings = [0.0]
    for seconds in durations:
        readings += [readings[-1], readings[-1] + seconds]
    clock = iter(readings[1:])
    monkeypatch.setattr(choice.time, "perf_counter", lambda: next(clock))
    runs = []
    seconds = choice.timed_in_turns({"a": lambda: runs.append("a"), "b": lambda: runs.append("b")}, turns=3)
    assert runs == ["a", "b"] * 4  # one warm-up run of each, then the turns
    assert seconds == {"a": 1.0, "b": 2.0}


def test_the_fastest_way_is_used_cached_for_the_machine_and_logged_once(measuring, monkeypatch, caplog):
    timings = []
    monkeypatch.setattr(
        choice, "timed_in_turns", lambda ways, turns: timings.append(sorted(ways)) or {"slow": 2.0, "quick": 1.0}
    )
    ways = {"slow": lambda: None, "quick": lambda: None}
    with caplog.at_level(logging.INFO, logger=choice.__name__):
        assert choice.fastest("some work rows<=1", ways) == "quick"
        assert choice.fastest("some work rows<=1", ways) == "quick"
    assert timings == [["quick", "slow"]]
    messages = [r.getMessage() for r in caplog.records if r.name == choice.__name__]
    assert messages == ["Way to run some work rows<=1 from quick/slow: quick, measured on this CPU (slow 2000.0 ms, quick 1000.0 ms)"]
    assert json.loads(measuring.read_text()) == {choice.cpu_identity(): {"some work rows<=1 from quick/slow": "quick"}}
    # Another process of the machine reads it, timing nothing; another class is timed anew.
    choice.forget_decisions()
    with caplog.at_level(logging.INFO, logger=choice.__name__):
        assert choice.fastest("some work rows<=1", ways) == "quick"
    assert timings == [["quick", "slow"]] and "decided before on this CPU" in caplog.records[-1].getMessage()
    choice.fastest("some work rows<=8", ways)
    assert len(timings) == 2


def test_the_first_process_to_write_a_way_decides_for_all(measuring, monkeypatch):
    name = "some work rows<=1 from quick/slow"

    def timed_while_another_process_decides(ways, turns):
        measuring.write_text(json.dumps({choice.cpu_identity(): {name: "slow"}}))
        return {"slow": 2.0, "quick": 1.0}

    monkeypatch.setattr(choice, "timed_in_turns", timed_while_another_process_decides)
    assert choice.fastest("some work rows<=1", {"slow": lambda: None, "quick": lambda: None}) == "slow"
    assert json.loads(measuring.read_text()) == {choice.cpu_identity(): {name: "slow"}}


def test_ways_are_timed_with_no_lock_held(measuring):
    weight = torch.randn(8, 4)
    executor = ThreadPoolExecutor(max_workers=1)

    def work_that_asks_for_a_kernel_in_another_thread():
        # What the LSTM's directions side by side do: the worker thread asks for its products'
        # kernels while the calling thread waits for it.
        future = executor.submit(choice.chosen, ("highway", (8, 4), "8"), {"mkl": lambda x: x @ weight.T},
                                 torch.randn(3, 4), weight, None)
        return future.result(timeout=20)

    try:
        assert choice.fastest("some work", {"only": work_that_asks_for_a_kernel_in_another_thread}) == "only"
    finally:
        executor.shutdown(wait=False)
    assert set(json.loads(measuring.read_text())[choice.cpu_identity()]) == {
        "highway 8x4 rows<=8 from mkl", "some work from only"
    }


def test_an_unusable_cache_still_chooses_a_way_and_says_so(measuring, monkeypatch, tmp_path, caplog):
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("")
    monkeypatch.setattr(choice, "CACHE_PATH", blocker / "kernel_choice.json")
    with caplog.at_level(logging.WARNING, logger=choice.__name__):
        assert choice.fastest("some work", {"only": lambda: None}) == "only"
    assert "cannot be used" in caplog.text and "other processes may choose differently" in caplog.text
