import json
import os

import numpy
import pytest
import torch
from allennlp.commands.evaluate import evaluate_from_archive
from allennlp.commands.train import train_model_from_file
from allennlp.common.checks import ConfigurationError
from allennlp.common.params import Params
from allennlp.common.testing import ModelTestCase
from allennlp.data import Batch, Vocabulary
from allennlp.data.data_loaders import SimpleDataLoader
from allennlp.models import Model
from allennlp.models.archival import load_archive
from allennlp.training.util import evaluate

from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader
from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary
from elmo_plugin.data.vocab_file import read_bilm_vocab_file
from elmo_plugin.models.bilm import ElmoBiLmModel
from elmo_plugin.models.export import export_bilm
from elmo_plugin.weights.formats import read_bilm_weights
from elmo_plugin.weights.options import ElmoOptions
from tests.helpers import (
    BILM_CONFIGS,
    BILM_SEED,
    BILM_TRAIN_TEXT,
    BILM_VOCAB_FILE,
    ELMO_OPTIONS_FILE,
    ELMO_WEIGHT_FILE,
    bilm_data_overrides,
    copy_of_the_fixture_biLM,
)


def tiny_model(options=None, **kwargs) -> ElmoBiLmModel:
    params = Params.from_file(str(BILM_CONFIGS / "tiny.jsonnet"), bilm_data_overrides())
    vocabulary = BiLmVocabulary.from_bilm_corpus(vocab_file=BILM_VOCAB_FILE)
    model_params = params["model"].as_dict()
    model_params.pop("type")
    model_params.update(kwargs)
    return ElmoBiLmModel(vocabulary, **model_params)


def test_training_drives_perplexity_far_below_the_vocabulary_and_its_start(trained_tiny_bilm):
    torch.manual_seed(BILM_SEED)
    untrained = tiny_model(dropout=0.0)
    reader = BiLmCorpusReader(window_size=10, num_streams=4)
    data_loader = SimpleDataLoader(list(reader.read(BILM_TRAIN_TEXT)), batch_size=4)
    data_loader.index_with(untrained.vocab)
    start = evaluate(untrained, data_loader)["perplexity"]
    metrics = json.loads((trained_tiny_bilm / "metrics.json").read_text())
    final = metrics["validation_perplexity"]
    vocabulary_size = len(read_bilm_vocab_file(BILM_VOCAB_FILE))
    assert start > vocabulary_size / 2  # an untrained model is near uniform over 32 words
    assert final < start / 4 and final < vocabulary_size / 4, (start, final)
    assert metrics["validation_forward_perplexity"] < vocabulary_size / 4
    assert metrics["validation_backward_perplexity"] < vocabulary_size / 4


def test_allennlp_evaluate_reports_the_full_softmax_perplexity(trained_tiny_bilm):
    metrics = evaluate_from_archive(str(trained_tiny_bilm / "model.tar.gz"), BILM_TRAIN_TEXT)
    # The same text as validation, which runs in eval mode (full softmax) too; the archive
    # holds the best epoch.
    validation = json.loads((trained_tiny_bilm / "metrics.json").read_text())
    for key in ("forward_perplexity", "backward_perplexity", "perplexity"):
        assert metrics[key] == pytest.approx(validation[f"best_validation_{key}"], rel=1e-5), key


def test_evaluation_reports_the_oov_rate_and_the_in_vocabulary_perplexity(trained_tiny_bilm, tmp_path, caplog):
    archive = str(trained_tiny_bilm / "model.tar.gz")
    # 8 words, 3 of them outside the 32-word vocabulary, and </S>: 3 of 9 forward targets.
    text = tmp_path / "text.txt"
    text.write_text("the zebra of neural quokka language models ocelot\n")
    metrics = evaluate_from_archive(archive, str(text))
    assert metrics["oov_rate"] == pytest.approx(3 / 9)
    assert metrics["in_vocabulary_perplexity"] != pytest.approx(metrics["perplexity"])
    assert "33.3% of the evaluated targets are <UNK>" in caplog.text
    # On text the vocabulary covers, nothing is unknown and the two perplexities agree.
    covered = tmp_path / "covered.txt"
    covered.write_text("the neural language models use embeddings of words .\n")
    metrics = evaluate_from_archive(archive, str(covered))
    assert metrics["oov_rate"] == 0.0
    assert metrics["in_vocabulary_perplexity"] == pytest.approx(metrics["perplexity"])


def test_the_full_softmax_of_evaluation_in_blocks_of_rows_gives_the_same_metrics(monkeypatch):
    torch.manual_seed(BILM_SEED)
    model = tiny_model(dropout=0.0).eval()
    reader = BiLmCorpusReader(window_size=10, num_streams=4)
    data_loader = SimpleDataLoader(list(reader.read(BILM_TRAIN_TEXT)), batch_size=4)
    data_loader.index_with(model.vocab)
    whole = evaluate(model, data_loader)
    # One row at a time (32 words in the vocabulary).
    monkeypatch.setattr("elmo_plugin.models.bilm._FULL_SOFTMAX_BLOCK", 32)
    blocks = evaluate(model, data_loader)
    for key in ("perplexity", "in_vocabulary_perplexity", "oov_rate", "loss"):
        assert blocks[key] == pytest.approx(whole[key], rel=1e-6), key


def test_fine_tuning_starts_from_exactly_the_files_weights_and_a_fresh_softmax():
    vocabulary = BiLmVocabulary.from_bilm_corpus(vocab_file=BILM_VOCAB_FILE)
    model = ElmoBiLmModel(
        vocabulary, options_file=ELMO_OPTIONS_FILE, weight_file=ELMO_WEIGHT_FILE, num_samples=8
    )
    options = ElmoOptions.from_file(ELMO_OPTIONS_FILE)
    in_file = read_bilm_weights(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).arrays
    loaded = model.bilm.weight_arrays()
    assert sorted(loaded) == sorted(in_file)
    for name, array in in_file.items():
        assert numpy.array_equal(loaded[name], array), name
    assert tuple(model._softmax_loss.softmax_w.shape) == (32, options.projection_dim)


def test_fine_tune_config_trains_from_a_weight_file(tmp_path):
    start = tmp_path / "start"
    copy_of_the_fixture_biLM(start)
    model = train_model_from_file(
        str(BILM_CONFIGS / "fine_tune.jsonnet"),
        str(tmp_path / "tuned"),
        overrides=bilm_data_overrides(
            **{
                "model.options_file": str(start / "options.json"),
                "model.weight_file": str(start / "lm_weights.hdf5"),
                "model.num_samples": 8,
                "vocabulary": {"type": "bilm", "min_count": 1},
                "dataset_reader.num_streams": 2,
                "validation_dataset_reader.num_streams": 2,
                "data_loader.batch_size": 2,
                "trainer.num_epochs": 1,
            }
        ),
    )
    metrics = json.loads((tmp_path / "tuned" / "metrics.json").read_text())
    assert numpy.isfinite(metrics["validation_perplexity"])
    assert isinstance(model, ElmoBiLmModel)
    # Its archive loads, and exports, without the files it started from (`weights.recorded`).
    start.rename(tmp_path / "moved")
    loaded = load_archive(str(tmp_path / "tuned" / "model.tar.gz")).model
    for name, value in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], value, rtol=0, atol=0)
    export_bilm(str(tmp_path / "tuned" / "model.tar.gz"), str(tmp_path / "exported"))
    exported = read_bilm_weights(str(tmp_path / "exported"), None).arrays
    for name, array in model._bilm.weight_arrays().items():
        numpy.testing.assert_array_equal(exported[name], array)


def test_carried_state_over_windows_equals_reading_the_stream_in_one_piece():
    torch.manual_seed(BILM_SEED)
    model = tiny_model(dropout=0.0).double().eval()
    perplexities = []
    # One stream, so that both read the same text (how sentences are dealt to several streams
    # depends on the window size).
    for window_size in (3, 1000):
        reader = BiLmCorpusReader(window_size=window_size, num_streams=1)
        instances = list(reader.read(BILM_TRAIN_TEXT))
        for instance in instances:
            batch = Batch([instance])
            batch.index_instances(model.vocab)
            model(**batch.as_tensor_dict())
        perplexities.append(model.get_metrics(reset=True))
    for key in ("forward_perplexity", "backward_perplexity", "perplexity"):
        assert perplexities[0][key] == pytest.approx(perplexities[1][key], rel=1e-12), key


def test_windows_out_of_stream_order_are_refused():
    model = tiny_model()
    reader = BiLmCorpusReader(window_size=5, num_streams=2)
    instances = list(reader.read(BILM_TRAIN_TEXT))
    batch = Batch([instances[1], instances[0]])
    batch.index_instances(model.vocab)
    with pytest.raises(ConfigurationError, match="out of stream order.*batch_size"):
        model(**batch.as_tensor_dict())


def test_bad_model_configurations_are_refused():
    vocabulary = BiLmVocabulary.from_bilm_corpus(vocab_file=BILM_VOCAB_FILE)
    options = ElmoOptions.from_file(ELMO_OPTIONS_FILE).to_dict()
    with pytest.raises(ConfigurationError, match="num_samples.*smaller than the vocabulary"):
        ElmoBiLmModel(vocabulary, options=options, num_samples=32)
    with pytest.raises(ConfigurationError, match="give 'options' or 'options_file', not both"):
        ElmoBiLmModel(vocabulary, options=options, options_file=ELMO_OPTIONS_FILE, num_samples=8)
    with pytest.raises(ConfigurationError, match="or a 'weight_file' that holds a whole model"):
        ElmoBiLmModel(vocabulary, num_samples=8)
    with pytest.raises(ConfigurationError, match="lacks <S>, </S>, <UNK>.*type.*bilm"):
        ElmoBiLmModel(Vocabulary({"lm_tokens": {"a": 1}}), options=options, num_samples=8)
    with pytest.raises(ConfigurationError, match="options.*lstm"):
        ElmoBiLmModel(vocabulary, options={"char_cnn": options["char_cnn"]}, num_samples=8)


def test_two_cpu_workers_train_with_distributed_data_parallel(tmp_path):
    serialization_dir = tmp_path / "ddp"
    train_model_from_file(
        str(BILM_CONFIGS / "tiny_distributed.jsonnet"),
        str(serialization_dir),
        overrides=bilm_data_overrides(**{"trainer.num_epochs": 2}),
        include_package=["elmo_plugin"],
    )
    logs = sorted(os.listdir(serialization_dir))
    assert {"out_worker0.log", "out_worker1.log"} <= set(logs), logs
    metrics = json.loads((serialization_dir / "metrics.json").read_text())
    assert numpy.isfinite(metrics["training_perplexity"])
    assert numpy.isfinite(metrics["validation_perplexity"])
    assert Model.load(
        Params.from_file(str(serialization_dir / "config.json")), str(serialization_dir)
    )


class TestElmoBiLmModelTrainsSavesAndLoads(ModelTestCase):
    def test_packed_windows(self):
        self.ensure_model_can_train_save_and_load(
            str(BILM_CONFIGS / "tiny.jsonnet"),
            overrides=bilm_data_overrides(
                **{"trainer.num_epochs": 2, "dataset_reader.shuffle": False}
            ),
            seed=BILM_SEED,
        )

    def test_sentences(self):
        self.ensure_model_can_train_save_and_load(
            str(BILM_CONFIGS / "tiny.jsonnet"),
            overrides=bilm_data_overrides(
                **{
                    "trainer.num_epochs": 2,
                    "dataset_reader": {"type": "elmo_bilm_corpus"},
                    "validation_dataset_reader": {"type": "elmo_bilm_corpus"},
                    "data_loader": {"type": "multiprocess", "batch_size": 2, "shuffle": True},
                }
            ),
            seed=BILM_SEED,
        )


def test_training_on_the_cpu_keeps_freed_memory_for_the_next_step(monkeypatch):
    from elmo_plugin.kernels import allocation

    calls = []
    monkeypatch.setattr(allocation, "keep_freed_memory_for_reuse", lambda: calls.append(1))
    model = tiny_model()
    instance = next(iter(BiLmCorpusReader(window_size=5, num_streams=1).read(BILM_TRAIN_TEXT)))
    batch = Batch([instance])
    batch.index_instances(model.vocab)
    model.eval()
    model(**batch.as_tensor_dict())
    assert calls == []
    model.train()
    model(**batch.as_tensor_dict())
    assert calls == [1]


def test_a_batch_of_windows_weighs_its_words_as_a_full_batch_would(tmp_path):
    # At the end of a pass a few streams still have text: a mean over their dozen words at a
    # full step's size took a trained biLM's held-out perplexity from 561 to 309,982 in two
    # steps (BENCHMARKS.md). A window batch's loss is its sum over streams x window positions.
    torch.manual_seed(BILM_SEED)
    model = tiny_model(dropout=0.0).double()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the bats hang upside down in the old cave by the river\n" * 3 + "x y\nbats fly .\n")
    reader = BiLmCorpusReader(window_size=4, num_streams=3)
    instances = list(reader.read(str(corpus)))
    full_or_partial = set()
    for start in range(0, len(instances), 3):
        batch = Batch(instances[start:start + 3])
        batch.index_instances(model.vocab)
        tensors = batch.as_tensor_dict()
        targets = int((tensors["forward_tokens"]["elmo"]["elmo_tokens"][:, 1:] > 0).any(-1).sum())
        positions = tensors["forward_tokens"]["elmo"]["elmo_tokens"][:, 1:].shape[:2].numel()
        for training in (True, False):  # evaluation reports the mean per word
            model.train(training)
            output = model(**tensors)
            metrics = model.get_metrics(reset=True)
            for direction in ("forward", "backward"):
                summed = numpy.log(metrics[f"{direction}_perplexity"]) * targets
                loss = float(output[f"{direction}_loss"].detach())
                assert loss == pytest.approx(summed / (positions if training else targets), rel=1e-9)
        full_or_partial.add(targets == positions)
    assert full_or_partial == {True, False}


def test_the_training_loss_samples_as_allennlps_sampled_softmax_does(tmp_path):
    from allennlp.modules.sampled_softmax_loss import _choice

    torch.manual_seed(BILM_SEED)
    model = tiny_model(dropout=0.0).double().train()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the bats hang upside down in the old cave by the river\n" * 3)
    batch = Batch(list(BiLmCorpusReader(window_size=4, num_streams=3).read(str(corpus)))[:3])
    batch.index_instances(model.vocab)
    tensors = batch.as_tensor_dict()
    losses = []
    for choice_func in (model._softmax_loss.choice_func, _choice):
        model._softmax_loss.choice_func = choice_func
        numpy.random.seed(0)
        losses.append(float(model(**tensors)["loss"].detach()))
    assert losses[0] == losses[1]
