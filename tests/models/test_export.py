import shutil
import subprocess
import sys
import tempfile

import numpy
import pytest
from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive
from allennlp.modules.elmo import Elmo as AllenNlpElmo

from elmo_plugin import batch_to_ids
from elmo_plugin.data.vocab_file import read_bilm_vocab_file
from elmo_plugin.models.bilm import ElmoBiLmModel
from elmo_plugin.models.export import export_bilm
from elmo_plugin.weights.formats import read_bilm_weights
from elmo_plugin.weights.options import ElmoOptions
from tests.helpers import BILM_VOCAB_FILE, REPO_ROOT
from tests.modules.oracle import FLOAT64_TOLERANCE, max_difference


def test_export_loads_in_allennlps_elmo_with_the_models_own_representations(
    trained_tiny_bilm, tmp_path
):
    paths = export_bilm(str(trained_tiny_bilm / "model.tar.gz"), str(tmp_path / "elmo"))
    model = load_archive(str(trained_tiny_bilm / "model.tar.gz")).model
    ours = model.bilm.double().eval()
    ours.stateful = True  # AllenNLP's biLM carries state from batch to batch, from zeros.
    ours.reset_states()
    theirs = AllenNlpElmo(paths["options"], paths["weights"], 1, dropout=0.0).double().eval()
    batches = [
        [["the", "neural", "models", "."], ["a"], ["unknown", "wörds", "x" * 60]],
        [["language", "models", "use", "embeddings", "of", "words"], []],
    ]
    for batch in batches:
        character_ids = batch_to_ids(batch)
        our_layers = ours(character_ids)["activations"]
        their_layers = theirs._elmo_lstm(character_ids)["activations"]
        assert max_difference(our_layers, their_layers) <= FLOAT64_TOLERANCE
    exported = ElmoOptions.from_file(paths["options"])
    assert (exported.cell_dim, exported.projection_dim, exported.n_layers) == (64, 16, 2)
    assert exported.n_tokens_vocab == 32
    assert read_bilm_vocab_file(paths["vocabulary"]) == read_bilm_vocab_file(BILM_VOCAB_FILE)


def test_a_serialization_directory_exports_the_same_weights(trained_tiny_bilm, tmp_path):
    from_archive = export_bilm(str(trained_tiny_bilm / "model.tar.gz"), str(tmp_path / "a"))
    from_directory = export_bilm(str(trained_tiny_bilm), str(tmp_path / "b"))
    first = read_bilm_weights(from_archive["options"], from_archive["weights"]).arrays
    second = read_bilm_weights(from_archive["options"], from_directory["weights"]).arrays
    assert all(numpy.array_equal(first[name], second[name]) for name in first)


def test_with_its_softmax_a_fine_tuned_model_starts_where_the_trained_one_ended(trained_tiny_bilm, tmp_path):
    paths = export_bilm(str(trained_tiny_bilm), str(tmp_path / "elmo"), with_softmax=True)
    trained = load_archive(str(trained_tiny_bilm / "model.tar.gz")).model
    tuned = ElmoBiLmModel(trained.vocab, weight_file=str(tmp_path / "elmo"), num_samples=8)
    for name, array in trained.softmax_arrays().items():
        assert numpy.array_equal(tuned.softmax_arrays()[name], array), name
    # AllenNLP's ELMo reads the file as ever.
    AllenNlpElmo(paths["options"], paths["weights"], 1)(batch_to_ids([["a", "b"]]))


def test_export_refuses_to_overwrite_and_names_missing_archives(trained_tiny_bilm, tmp_path):
    export_bilm(str(trained_tiny_bilm), str(tmp_path / "elmo"))
    with pytest.raises(ConfigurationError, match="already exist.*--overwrite"):
        export_bilm(str(trained_tiny_bilm), str(tmp_path / "elmo"))
    export_bilm(str(trained_tiny_bilm), str(tmp_path / "elmo"), overwrite=True)
    with pytest.raises(ConfigurationError, match="no such archive or directory: .*nothing-here"):
        export_bilm(str(tmp_path / "nothing-here"), str(tmp_path / "other"))


def test_elmo_export_command_line(trained_tiny_bilm, tmp_path):
    output_directory = tmp_path / "cli"
    completed = subprocess.run(
        [sys.executable, "-m", "elmo_plugin", "elmo-export", str(trained_tiny_bilm),
         str(output_directory)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert f"weights: {output_directory / 'weights.hdf5'}" in completed.stdout
    assert sorted(p.name for p in output_directory.iterdir()) == [
        "options.json", "vocab.txt", "weights.hdf5"
    ]


@pytest.mark.parametrize("damaged", ["best.th", "model.tar.gz"])
def test_a_truncated_model_file_is_named(trained_tiny_bilm, tmp_path, damaged, monkeypatch):
    # AllenNLP's load_archive leaves what it extracted of a truncated archive: in tmp_path here.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    copy = tmp_path / "serialization"
    shutil.copytree(trained_tiny_bilm, copy)
    path = copy / damaged
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    source = copy if damaged == "best.th" else path
    with pytest.raises(ConfigurationError, match=f"cannot load the model of {source}: {path} is damaged or truncated"):
        export_bilm(str(source), str(tmp_path / "elmo"))
    assert not (tmp_path / "elmo").exists()
