"""
The task configs in training_config/: each trains for one epoch on tiny data with the fixture
biLM, in this process (`train_model_from_file`), with the paper's ELMo settings in place.
"""
import json
import math
import os
import re
from unittest import mock

import allennlp_models.structured_prediction  # noqa: F401  (srl reader and model)
import allennlp_models.tagging  # noqa: F401  (conll2000/conll2003 readers, crf_tagger)
import pytest
import torch
from allennlp.commands.evaluate import evaluate_from_archive
from allennlp.commands.train import train_model_from_file
from allennlp.common import Params
from allennlp.common.testing import AllenNlpTestCase

from elmo_plugin import ElmoTokenEmbedder
from elmo_plugin.training.config_environment import (
    ORIGINAL_ELMO,
    apply_config_environment_defaults,
)
from tests.helpers import (
    ELMO_OPTIONS_FILE,
    ELMO_WEIGHT_FILE,
    REPO_ROOT,
    SHARED_FIXTURES,
    TEST_FIXTURES,
)

CONFIGS = REPO_ROOT / "training_config"
TASKS = TEST_FIXTURES / "tasks"

# config -> (its data variables' prefix, tiny training data, the validation metric)
TASK_CONFIGS = {
    "srl_elmo.jsonnet": ("SRL", SHARED_FIXTURES / "srl", "f1-measure-overall"),
    "ner_elmo.jsonnet": ("NER", SHARED_FIXTURES / "ner" / "conll2003.txt", "f1-measure-overall"),
    "chunking_elmo.jsonnet": ("CHUNKING", TASKS / "conll2000.txt", "f1-measure-overall"),
    "pos_elmo.jsonnet": ("POS", TASKS / "pos.txt", "accuracy"),
    "sentiment_elmo.jsonnet": ("SENTIMENT", TASKS / "sentiment.jsonl", "accuracy"),
}


def data_with_an_unseen_label(config: str, directory) -> str:
    """Test data in the task's format holding a label its tiny training data lacks."""
    if config == "chunking_elmo.jsonnet":  # LST: the list-marker chunk of CoNLL-2000's test set
        path = directory / "test.txt"
        path.write_text("1 LS B-LST\nCats NNS B-NP\nsleep VBP B-VP\n. . O\n")
    elif config == "ner_elmo.jsonnet":  # MISC
        path = directory / "test.txt"
        path.write_text("-DOCSTART- -X- -X- O\n\nEuropean JJ I-NP I-MISC\nleaders NNS I-NP O\n")
    elif config == "pos_elmo.jsonnet":  # UH
        path = directory / "test.txt"
        path.write_text("Oh/UH ,/, the/DT cat/NN sat/VBD ./.\n")
    else:  # SRL: ARGM-TMP becomes ARGM-PRX, a role of OntoNotes that the fixture lacks
        path = directory / "srl_test"
        path.mkdir()
        fixture = (SHARED_FIXTURES / "srl" / "example.gold_conll").read_text()
        (path / "example.gold_conll").write_text(fixture.replace("(ARGM-TMP*", "(ARGM-PRX*"))
    return str(path)


def task_environment(config: str, **elmo_variables: str):
    prefix, data, _ = TASK_CONFIGS[config]
    environment = {f"{prefix}_TRAIN_DATA_PATH": str(data), f"{prefix}_VALIDATION_DATA_PATH": str(data)}
    environment.update(elmo_variables)
    return environment


def without_elmo_variables():
    return {name: value for name, value in os.environ.items() if name not in ORIGINAL_ELMO}


class TestTaskConfigs(AllenNlpTestCase):
    @pytest.mark.parametrize("config", sorted(TASK_CONFIGS))
    def test_trains_one_epoch_with_the_fixture_bilm(self, config):
        elmo_variables = {"ELMO_OPTIONS_FILE": ELMO_OPTIONS_FILE, "ELMO_WEIGHT_FILE": ELMO_WEIGHT_FILE}
        apply_config_environment_defaults(elmo_variables)
        assert elmo_variables["ELMO_DIM"] == "32"  # read from the fixture's options file
        environment = dict(without_elmo_variables(), **task_environment(config, **elmo_variables))
        serialization_dir = self.TEST_DIR / config
        with mock.patch.dict(os.environ, environment, clear=True):
            model = train_model_from_file(
                str(CONFIGS / config),
                str(serialization_dir),
                overrides=json.dumps({"trainer.num_epochs": 1, "trainer.cuda_device": -1}),
            )
        metrics = json.loads((serialization_dir / "metrics.json").read_text())
        assert math.isfinite(metrics["training_loss"])
        validation_metric = TASK_CONFIGS[config][2]
        assert 0.0 <= metrics[f"validation_{validation_metric}"] <= 1.0
        if config != "sentiment_elmo.jsonnet":  # tagging tasks: test data may hold unseen labels
            with mock.patch.dict(os.environ, environment, clear=True):
                test_metrics = evaluate_from_archive(
                    str(serialization_dir / "model.tar.gz"), data_with_an_unseen_label(config, self.TEST_DIR)
                )
            assert 0.0 <= test_metrics[validation_metric] <= 1.0

        embedders = [module for module in model.modules() if isinstance(module, ElmoTokenEmbedder)]
        assert len(embedders) == 1 and type(embedders[0]) is ElmoTokenEmbedder
        elmo = embedders[0]
        assert elmo._elmo._dropout.p == 0.5
        assert not elmo._elmo.scalar_mix_0.do_layer_norm
        # The L2 penalty reaches the scalar-mix weights and nothing else.
        penalised = [name for name, _ in model.named_parameters()
                     if any(re.search(regex, name) for regex, _ in model._regularizer._regularizers)]
        assert penalised and all("scalar_parameters" in name for name in penalised)
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name in penalised:
                    parameter.fill_(2.0)
            assert float(model.get_regularization_penalty()) == pytest.approx(0.001 * 4.0 * len(penalised))

    def test_defaults_are_the_published_original_elmo(self):
        environment = task_environment("sentiment_elmo.jsonnet")
        apply_config_environment_defaults(environment)
        with mock.patch.dict(os.environ, dict(without_elmo_variables(), **environment), clear=True):
            params = Params.from_file(str(CONFIGS / "sentiment_elmo.jsonnet"))
        embedder = params["model"]["text_field_embedder"]["token_embedders"]["elmo"]
        assert embedder["options_file"] == ORIGINAL_ELMO["ELMO_OPTIONS_FILE"]
        assert embedder["weight_file"] == ORIGINAL_ELMO["ELMO_WEIGHT_FILE"]
        assert params["model"]["seq2vec_encoder"]["input_size"] == 50 + 1024

    def test_user_variables_are_kept(self):
        environment = {"ELMO_OPTIONS_FILE": "mine.json", "ELMO_WEIGHT_FILE": "mine.hdf5", "ELMO_DIM": "7"}
        apply_config_environment_defaults(environment)
        assert environment == {"ELMO_OPTIONS_FILE": "mine.json", "ELMO_WEIGHT_FILE": "mine.hdf5", "ELMO_DIM": "7"}
        # A size that cannot be known without a download stays unset: Jsonnet names it.
        environment = {"ELMO_OPTIONS_FILE": "https://example.org/options.json", "ELMO_WEIGHT_FILE": "w.hdf5"}
        apply_config_environment_defaults(environment)
        assert "ELMO_DIM" not in environment
        with mock.patch.dict(os.environ, dict(without_elmo_variables(), **task_environment(
                "pos_elmo.jsonnet", **environment)), clear=True):
            with pytest.raises(RuntimeError, match="undefined external variable: ELMO_DIM"):
                Params.from_file(str(CONFIGS / "pos_elmo.jsonnet"))

    def test_the_size_is_read_from_a_model_directory_or_archive(self, trained_tiny_bilm):
        # The biLM's archive, its serialization directory, an export: each a whole model.
        for model in (trained_tiny_bilm / "model.tar.gz", trained_tiny_bilm):
            environment = {"ELMO_OPTIONS_FILE": str(model), "ELMO_WEIGHT_FILE": str(model)}
            apply_config_environment_defaults(environment)
            assert environment["ELMO_DIM"] == "32"  # 2 x the tiny biLM's projection_dim

    def test_a_missing_data_variable_is_named(self):
        environment = task_environment("ner_elmo.jsonnet", **ORIGINAL_ELMO)
        del environment["NER_VALIDATION_DATA_PATH"]
        with mock.patch.dict(os.environ, dict(without_elmo_variables(), **environment), clear=True):
            with pytest.raises(RuntimeError, match="undefined external variable: NER_VALIDATION_DATA_PATH"):
                Params.from_file(str(CONFIGS / "ner_elmo.jsonnet"))


ALL_CONFIGS = sorted(str(path.relative_to(CONFIGS)) for path in CONFIGS.rglob("*.jsonnet"))
EXTERNAL_VARIABLES = dict(
    {f"{prefix}_{kind}_DATA_PATH": "data.txt" for prefix, _, _ in TASK_CONFIGS.values() for kind in ("TRAIN", "VALIDATION")},
    ELMO_OPTIONS_FILE="options.json", ELMO_WEIGHT_FILE="weights.hdf5", ELMO_DIM="32",
    DEMO_TAGGING_TRAIN="train.txt", DEMO_TAGGING_DEV="dev.txt", DEMO_ELMO_OPTIONS="o.json", DEMO_ELMO_WEIGHTS="w.hdf5",
)


@pytest.mark.parametrize("config", ALL_CONFIGS)
def test_no_config_logs_the_first_batchs_tensors(config):
    # AllenNLP's default console logger prints the first batch's inputs: ELMo's character ids.
    trainer = Params.from_file(str(CONFIGS / config), ext_vars=EXTERNAL_VARIABLES).as_dict()["trainer"]
    assert trainer["enable_default_callbacks"] is False, config
    loggers = [callback for callback in trainer["callbacks"] if callback["type"] == "console_logger"]
    assert loggers == [{"type": "console_logger", "should_log_inputs": False}], config


def test_bilm_training_does_not_log_character_ids(tmp_path, caplog):
    from tests.helpers import BILM_CONFIGS, bilm_data_overrides

    with caplog.at_level("INFO"):
        train_model_from_file(str(BILM_CONFIGS / "tiny.jsonnet"), str(tmp_path / "bilm"),
                              overrides=bilm_data_overrides(**{"trainer.num_epochs": 1}))
    assert (tmp_path / "bilm" / "metrics.json").exists()
    assert "Batch inputs" not in caplog.text and "batch_input" not in caplog.text
