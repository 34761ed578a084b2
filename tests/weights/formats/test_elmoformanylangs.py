"""The ELMoForManyLangs format: its files read as ELMoForManyLangs reads them, bad ones named."""
import json
import os
import pickle
import shutil
import zipfile

import pytest
import torch
from allennlp.common import file_utils
from allennlp.common.checks import ConfigurationError

from elmo_plugin import ElmoBiLm, batch_to_ids
from elmo_plugin.weights.formats import read_bilm_weights
from elmo_plugin.weights.formats.elmoformanylangs import PACKAGED_ARCHITECTURES, _architecture
from tests.fixtures.elmoformanylangs_model import make_model


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return make_model(str(tmp_path_factory.mktemp("pristine") / "model"))


@pytest.fixture
def model(pristine, tmp_path):
    """A copy to damage."""
    return shutil.copytree(pristine, tmp_path / "model")


def test_an_nlpl_zip_with_meta_json(pristine, tmp_path, monkeypatch):
    monkeypatch.setattr(file_utils, "CACHE_DIRECTORY", str(tmp_path / "cache"))
    path = tmp_path / "182.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for name in os.listdir(pristine):
            archive.write(os.path.join(pristine, name), name)
        archive.writestr("meta.json", json.dumps({"id": 182, "corpus": ["test"]}))
    ids = batch_to_ids([["кошка", "我们"]])
    with torch.no_grad():
        for ours, theirs in zip(ElmoBiLm(None, str(path), stateful=False)(ids)["activations"],
                                ElmoBiLm(pristine, None, stateful=False)(ids)["activations"]):
            assert torch.equal(ours, theirs)


def test_the_vocabularies_are_read_as_elmoformanylangs_reads_them(model):
    weights = read_bilm_weights(None, str(model))
    characters = list(weights.arrays["char_vocabulary"])
    assert characters[:3] == ["a", "b", "c"] and "我" in characters and "к" in characters
    assert characters[-6:] == ["<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"]
    assert list(weights.arrays["word_vocabulary"])[:4] == ["<oov>", "<bos>", "<eos>", "<pad>"]
    options = weights.options
    assert (options.characters, options.word_dim, options.n_words) == ("elmoformanylangs", 6, 19)
    assert weights.arrays["CNN_proj/W_proj"].shape == (6 + 18, 8)


def entries(model, name="char.dic") -> int:
    return len((model / name).read_text(encoding="utf-8").splitlines())


def test_a_line_with_only_an_id_is_u3000_as_in_elmoformanylangs(model):
    next_id = entries(model)
    with open(model / "char.dic", "a", encoding="utf-8") as handle:
        handle.write(f"\u3000\t{next_id}\n")  # stripped to the id alone
    state = torch.load(model / "token_embedder.pkl", weights_only=True)
    weight = state["char_emb_layer.embedding.weight"]
    state["char_emb_layer.embedding.weight"] = torch.cat([weight, torch.zeros(1, weight.size(1))])
    torch.save(state, model / "token_embedder.pkl")
    assert list(read_bilm_weights(None, str(model)).arrays["char_vocabulary"])[-1] == "\u3000"


@pytest.mark.parametrize("line, message", [
    ("x\ty\n", r"char.dic, line {n}: expected 'entry<TAB>id' with an integer id, got 'x\\ty'"),
    ("a\tb\t3\n", r"char.dic, line {n}: expected 'entry<TAB>id'"),
    ("\n", r"char.dic, line {n}: expected 'entry<TAB>id'"),
    ("zz\t3\n", r"char.dic, line {n}: id 3 is already the id of 'd' \(line 4\)"),
    ("zz\t\u00b2\n", r"char.dic, line {n}: expected 'entry<TAB>id' with an integer id"),  # '²'.isdigit()
    ("zz\t-1\n", r"char.dic, line {n}: expected 'entry<TAB>id' with an integer id"),
])
def test_malformed_dictionary_lines_are_named(model, line, message):
    line_number = entries(model) + 1
    with open(model / "char.dic", "a", encoding="utf-8") as handle:
        handle.write(line)
    with pytest.raises(ConfigurationError, match=message.format(n=line_number)):
        read_bilm_weights(None, str(model))


def test_a_dictionary_without_a_special_entry_is_named(model):
    lines = (model / "word.dic").read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if not line.startswith("<pad>")]
    renumbered = [f"{line.split(chr(9))[0]}\t{i}" for i, line in enumerate(kept)]
    (model / "word.dic").write_text("\n".join(renumbered) + "\n", encoding="utf-8")
    state = torch.load(model / "token_embedder.pkl", weights_only=True)
    state["word_emb_layer.embedding.weight"] = state["word_emb_layer.embedding.weight"][:-1]
    torch.save(state, model / "token_embedder.pkl")
    with pytest.raises(ConfigurationError, match="word vocabulary needs <bos>, <eos>, <oov>, <pad>; it lacks <pad>"):
        ElmoBiLm(None, str(model))


def test_an_architecture_that_disagrees_with_the_tensors_names_the_tensor(model):
    architecture = json.loads((model / "tiny_architecture.json").read_text())
    architecture["encoder"]["dim"] = 32
    (model / "tiny_architecture.json").write_text(json.dumps(architecture))
    with pytest.raises(ConfigurationError, match=r"encoder.pkl's tensor 'forward_layer_0.input_linearity.weight' has "
                                                 r"shape \(64, 8\), but tiny_architecture.json .* require \(128, 8\)"):
        read_bilm_weights(None, str(model))


def test_missing_and_unexpected_tensors_are_named(model):
    state = torch.load(model / "encoder.pkl", weights_only=True)
    torch.save({**state, "extra.weight": torch.zeros(2)}, model / "encoder.pkl")
    with pytest.raises(ConfigurationError, match="encoder.pkl holds 'extra.weight', which tiny_architecture.json does not describe"):
        read_bilm_weights(None, str(model))
    del state["backward_layer_1.state_projection.weight"]
    torch.save(state, model / "encoder.pkl")
    with pytest.raises(ConfigurationError, match=r"encoder.pkl has no tensor 'backward_layer_1.state_projection.weight' "
                                                 r"\(expected shape \(8, 16\)"):
        read_bilm_weights(None, str(model))


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo this-must-not-run",))


def test_pickles_are_loaded_without_running_their_code(model, capfd):
    with open(model / "encoder.pkl", "wb") as handle:
        pickle.dump({"forward_layer_0.input_linearity.weight": _Payload()}, handle, protocol=2)
    with pytest.raises(ConfigurationError, match="encoder.pkl cannot be read as a PyTorch state dict .*weights_only=True"):
        read_bilm_weights(None, str(model))
    assert "this-must-not-run" not in capfd.readouterr().out


def test_configuration_problems_are_named(model):
    (model / "config.json").write_text(json.dumps({"seed": 1}))
    with pytest.raises(ConfigurationError, match="config.json has no 'config_path'"):
        read_bilm_weights(None, str(model))
    (model / "config.json").write_text(json.dumps({"config_path": "/training/machine/lstm_config.json"}))
    with pytest.raises(ConfigurationError, match="'config_path' is '/training/machine/lstm_config.json', which is "
                                                 "neither in the model directory nor one of ELMoForManyLangs' packaged"):
        read_bilm_weights(None, str(model))
    architecture = json.loads((model / "tiny_architecture.json").read_text())
    architecture["encoder"]["name"] = "lstm"
    (model / "tiny_architecture.json").write_text(json.dumps(architecture))
    (model / "config.json").write_text(json.dumps({"config_path": "/elsewhere/tiny_architecture.json"}))
    with pytest.raises(ConfigurationError, match="only ELMoForManyLangs' ELMo models load here .* 'lstm'"):
        read_bilm_weights(None, str(model))


def test_a_missing_word_dictionary_is_named(model):
    os.remove(model / "word.dic")
    with pytest.raises(ConfigurationError, match="word.dic is missing"):
        read_bilm_weights(None, str(model))


def test_the_published_models_name_a_packaged_architecture(tmp_path):
    # The published models' config.json name the architecture ELMoForManyLangs ships, by the
    # path it had on the machine that trained them.
    (tmp_path / "config.json").write_text(json.dumps({"config_path": "/home/x/configs/cnn_50_100_512_4096_sample.json"}))
    architecture, name = _architecture(str(tmp_path), "zhs.model")
    assert architecture is PACKAGED_ARCHITECTURES["cnn_50_100_512_4096_sample.json"]
    assert name == "cnn_50_100_512_4096_sample.json" and architecture["encoder"]["dim"] == 4096


@pytest.mark.parametrize("name", ["char.dic", "word.dic"])
def test_a_byte_order_mark_is_not_part_of_the_first_entry(pristine, model, name):
    (model / name).write_bytes(b"\xef\xbb\xbf" + (model / name).read_bytes())
    expected = read_bilm_weights(None, str(pristine)).arrays
    actual = read_bilm_weights(None, str(model)).arrays
    for vocabulary in ("char_vocabulary", "word_vocabulary"):
        assert list(actual[vocabulary]) == list(expected[vocabulary])
