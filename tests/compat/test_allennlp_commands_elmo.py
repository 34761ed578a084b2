"""
AllenNLP 0.9's `allennlp.commands.elmo` in any process of this environment, with 0.9's
behaviour: the behaviours AllenNLP 0.9's own `tests/commands/elmo_test.py` checks, and what
client code such as flair touches.
"""
import json
import shutil
import subprocess
import sys

import h5py
import numpy
import pytest
import torch

import elmo_plugin_import_hook
from tests.helpers import ELMO_FIXTURES, ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, REPO_ROOT


def run_python(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_old_path_works_in_a_fresh_process_without_importing_the_plugin(tmp_path):
    completed = run_python(
        "import sys\n"
        "from allennlp.commands.elmo import ElmoEmbedder, DEFAULT_OPTIONS_FILE, DEFAULT_WEIGHT_FILE, "
        "DEFAULT_BATCH_SIZE\n"
        "import allennlp.modules.elmo\n"
        "print(ElmoEmbedder.__module__, DEFAULT_BATCH_SIZE, DEFAULT_OPTIONS_FILE.endswith('options.json'))\n"
        # AllenNLP's own modules are untouched.
        "print(allennlp.modules.elmo._ElmoBiLm.__module__)\n",
        cwd=tmp_path,  # no .allennlp_plugins here
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.split() == [
        "elmo_plugin.compat.allennlp_commands_elmo", "64", "True", "allennlp.modules.elmo"
    ]


def test_the_finder_answers_only_for_old_paths():
    assert elmo_plugin_import_hook.CompatFinder in sys.meta_path
    assert elmo_plugin_import_hook.CompatFinder.find_spec("allennlp.commands.train") is None
    assert elmo_plugin_import_hook.CompatFinder.find_spec("allennlp.commands.elmo") is not None
    with pytest.raises(ModuleNotFoundError):
        import allennlp.commands.no_such_module  # noqa: F401


def fixture_sentences_in_file_order():
    """The TF fixture's sentences and top layers, in the order its batches of 3 were run."""
    sentences = json.loads((ELMO_FIXTURES / "sentences.json").read_text())
    ordered, expected = [], []
    for i in range(10):
        for k in range(3):
            ordered.append(sentences[k][i].split())
            with h5py.File(ELMO_FIXTURES / f"lm_embeddings_{k}.hdf5", "r") as handle:
                expected.append(numpy.concatenate(handle[str(i)][...], axis=-1))
    return ordered, expected


def test_defaults_carry_state_as_0_9_did_and_reproduce_the_tensorflow_fixture():
    from allennlp.commands.elmo import ElmoEmbedder

    sentences, expected = fixture_sentences_in_file_order()
    embedder = ElmoEmbedder(options_file=ELMO_OPTIONS_FILE, weight_file=ELMO_WEIGHT_FILE)
    embedded = list(embedder.embed_sentences(sentences, 3))
    assert len(embedded) == 30
    for vectors, reference in zip(embedded, expected):
        numpy.testing.assert_allclose(vectors[2], reference, rtol=1e-5, atol=1e-6)


def test_deterministic_mode_is_one_argument_away():
    from allennlp.commands.elmo import ElmoEmbedder

    embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False)
    first = embedder.embed_sentence(["The", "cat"])
    numpy.testing.assert_array_equal(embedder.embed_sentence(["The", "cat"]), first)
    carried = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    carried.embed_sentence(["The", "cat"])
    assert not numpy.allclose(carried.embed_sentence(["The", "cat"]), first)


def test_what_client_code_touches():
    from allennlp.commands.elmo import ElmoEmbedder

    embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, cuda_device=-1)
    assert embedder.cuda_device == -1 and embedder.indexer is not None
    assert embedder.embed_sentence([]).shape == (3, 0, 32)  # 0.9 hard-coded 1024 here (a bug)
    embedder.embed_batch([["hello"]])
    # flair's __setstate__: moves the biLM and its carried state with plain torch calls.
    lstm = embedder.elmo_bilm._elmo_lstm
    assert [tuple(part.shape) for part in lstm._states] == [(2, 1, 32), (2, 1, 128)]
    embedder.elmo_bilm.to(torch.float64)
    lstm._states = tuple(state.to(torch.float64) for state in lstm._states)
    activations, mask = embedder.batch_to_embeddings([["a", "b"], ["c"]])
    assert activations.shape == (2, 3, 2, 32) and activations.dtype == torch.float64
    assert mask.tolist() == [[True, True], [True, False]]


def test_embed_file_takes_an_open_file_as_0_9_did(tmp_path):
    from allennlp.commands.elmo import ElmoEmbedder

    path = tmp_path / "sentences.txt"
    path.write_text("Michael went to the store .\nA second one\n")
    embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE)
    with open(path) as handle:
        embedder.embed_file(handle, str(tmp_path / "out.hdf5"), output_format="top", batch_size=2)
    with h5py.File(tmp_path / "out.hdf5", "r") as handle:
        assert set(handle) == {"0", "1", "sentence_to_index"}
        assert handle["0"].shape == (6, 32)
        assert json.loads(handle["sentence_to_index"][0]) == {"Michael went to the store .": "0", "A second one": "1"}
