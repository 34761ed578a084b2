"""The `elmo_bilm` predictor on the tiny biLM trained once per session (tests/conftest.py)."""
import json
import math
import subprocess
import sys

import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Batch
from allennlp.models.archival import load_archive
from allennlp.predictors import Predictor

from elmo_plugin import ElmoBiLmPredictor
from elmo_plugin.data.bilm_corpus_reader import LM_NAMESPACE
from tests.helpers import REPO_ROOT

# Sentences of the training corpus (../shared/fixtures/bilm_train/data.txt) the model learnt.
SEEN = "these models make use of neural networks ."
SEEN_TOO = "neural language models use continuous representations or embeddings of words ."


@pytest.fixture(scope="module")
def predictor(trained_tiny_bilm):
    return Predictor.from_archive(load_archive(str(trained_tiny_bilm / "model.tar.gz")))


def test_from_archive_gives_the_bilm_predictor_by_default(predictor):
    assert type(predictor) is ElmoBiLmPredictor


def test_next_word_distributions_sum_to_one(predictor):
    model = predictor._model
    instances = [predictor._json_to_instance({"sentence": text}) for text in (SEEN, "neural", "")]
    batch = Batch(instances)
    batch.index_instances(model.vocab)
    with torch.no_grad():
        scores = model.score_sentences(batch.as_tensor_dict()["tokens"])
    for name in ("next_word_log_probs", "previous_word_log_probs"):
        totals = scores[name].exp().sum(dim=-1)
        assert torch.allclose(totals, torch.ones_like(totals), atol=1e-5), name
        assert scores[name].size(-1) == model.vocab.get_vocab_size(LM_NAMESPACE)


def test_memorised_contexts_predict_the_right_word(predictor):
    next_words = predictor.next_words("these models make use of neural", top_k=3)["next_words"]
    assert next_words[0]["word"] == "networks"
    probabilities = [entry["probability"] for entry in next_words]
    assert probabilities == sorted(probabilities, reverse=True) and len(probabilities) == 3
    previous_words = predictor.previous_words(SEEN_TOO.split()[1:])
    assert previous_words["previous_words"][0]["word"] == "neural"
    assert len(previous_words["previous_words"]) == 10


def test_sentence_log_probability_is_the_sum_of_its_tokens_and_matches_the_loss(predictor):
    scores = predictor.score(SEEN)
    words = SEEN.split()
    assert scores["forward_tokens"] == words + ["</S>"]
    assert scores["backward_tokens"] == ["<S>"] + words
    assert scores["forward_log_prob"] == pytest.approx(sum(scores["forward_log_probs"]), abs=1e-9)
    assert scores["backward_log_prob"] == pytest.approx(sum(scores["backward_log_probs"]), abs=1e-9)
    assert scores["log_prob"] == pytest.approx(0.5 * (scores["forward_log_prob"] + scores["backward_log_prob"]))
    for direction, offset in (("forward", 0), ("backward", 1)):
        bits = [-value / math.log(2) for value in scores[f"{direction}_log_probs"]]
        assert scores[f"{direction}_surprisal"] == pytest.approx(bits[offset:offset + len(words)])
    # The model's own (sampled-softmax-free, eval-mode) loss on the same sentence.
    model = predictor._model
    output = model.forward_on_instance(predictor._json_to_instance({"sentence": SEEN}))
    targets = len(words) + 1
    assert -scores["forward_log_prob"] / targets == pytest.approx(float(output["forward_loss"]), rel=1e-5)
    assert -scores["backward_log_prob"] / targets == pytest.approx(float(output["backward_loss"]), rel=1e-5)


def test_a_batch_of_mixed_requests_equals_single_requests(predictor):
    requests = [{"prefix": "neural", "top_k": 4}, {"sentence": SEEN_TOO}, {"suffix": "networks ."},
                {"sentence": "of"}, {"prefix": SEEN_TOO.split()[:-3]}]
    batched = predictor.predict_batch_json(requests)
    for request, output in zip(requests, batched):
        assert_close(output, predictor.predict_json(request))


def assert_close(actual, expected):
    """Equal structure and words; numbers equal up to float32 noise (padding changes sums)."""
    if isinstance(expected, dict):
        assert sorted(actual) == sorted(expected)
        for key in expected:
            assert_close(actual[key], expected[key])
    elif isinstance(expected, list):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_close(a, e)
    elif isinstance(expected, float):
        assert actual == pytest.approx(expected, rel=1e-5, abs=1e-6)
    else:
        assert actual == expected


def test_empty_prefix_is_the_first_word_distribution(predictor):
    first_words = {e["word"]: e["probability"] for e in predictor.next_words("", top_k=40)["next_words"]}
    scores = predictor.score(SEEN_TOO)
    assert first_words["neural"] == pytest.approx(math.exp(scores["forward_log_probs"][0]), rel=1e-5)
    assert "<S>" not in first_words  # impossible as a next word
    last_words = {e["word"] for e in predictor.previous_words([], top_k=40)["previous_words"]}
    assert "</S>" not in last_words and "." in last_words


def test_unknown_words_are_read_by_characters_and_scored_as_unk(predictor):
    scores = predictor.score("these zebras make use of neural networks .")
    assert scores["unknown"] == [True, True, False, False, False, False, False, False]
    after_these = {e["word"]: e["probability"]
                   for e in predictor.next_words("these", top_k=40)["next_words"]}
    assert math.exp(scores["forward_log_probs"][1]) == pytest.approx(after_these["<UNK>"], rel=1e-5)


@pytest.mark.parametrize(
    "request_, message",
    [
        ({}, "exactly one of prefix, suffix, sentence"),
        ({"prefix": "a", "sentence": "b"}, "exactly one of"),
        ({"prefix": 3}, "'prefix' must be a string or a list of non-empty strings"),
        ({"suffix": ["ok", ""]}, "'suffix' must be a string"),
        ({"prefix": "a", "top_k": 0}, "'top_k' must be a positive integer"),
        (["prefix"], "expected a JSON object"),
    ],
)
def test_bad_requests_say_what_was_expected(predictor, request_, message):
    with pytest.raises(ConfigurationError, match=message) as refusal:
        predictor.predict_json(request_)
    assert str(refusal.value).endswith(f"In the request {json.dumps(request_)}")  # to find it among many


def test_a_request_from_python_that_json_cannot_hold_is_refused_for_what_it_is(predictor):
    with pytest.raises(ConfigurationError, match=r"'prefix' must be a string.*In the request \{\"prefix\": \"\{'a'\}\"\}"):
        predictor.predict_json({"prefix": {"a"}})


def test_a_line_of_the_input_that_is_not_json_is_refused_with_its_number(predictor):
    assert predictor.load_line('{"prefix": "a"}\n') == {"prefix": "a"}
    with pytest.raises(ConfigurationError, match=r"non-blank line 2 of the input is not JSON \(.* at column 1\): 'not json'"):
        predictor.load_line("not json\n")


def test_allennlp_predict_on_json_lines(trained_tiny_bilm, tmp_path):
    requests = [{"prefix": "these models make use of neural", "top_k": 2}, {"sentence": SEEN}]
    input_file = tmp_path / "requests.jsonl"
    input_file.write_text("".join(json.dumps(r) + "\n" for r in requests))
    output_file = tmp_path / "predictions.jsonl"
    completed = subprocess.run(
        [sys.executable, "-m", "allennlp", "predict", str(trained_tiny_bilm / "model.tar.gz"),
         str(input_file), "--output-file", str(output_file), "--silent", "--batch-size", "2"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = [json.loads(line) for line in output_file.read_text().splitlines()]
    assert lines[0]["next_words"][0]["word"] == "networks" and len(lines[0]["next_words"]) == 2
    assert lines[1]["forward_tokens"][-1] == "</S>"


def test_substitutes_are_next_and_previous_words_position_by_position(predictor):
    words = SEEN.split()
    vocabulary_size = predictor._model.vocab.get_vocab_size(LM_NAMESPACE)
    result = predictor.substitutes(SEEN, top_k=5)
    assert result["tokens"] == words and len(result["substitutes"]) == len(words)

    def as_dict(listed, drop):
        return {entry["word"]: entry["probability"] for entry in listed if entry["word"] != drop}

    for position, found in enumerate(result["substitutes"]):
        assert found["word"] == words[position]
        # The forward LM from the left context is next_words after the words before it ...
        forward = as_dict(predictor.next_words(words[:position], top_k=vocabulary_size)["next_words"], "</S>")
        # ... the backward LM from the right context is previous_words before the words after it.
        backward = as_dict(predictor.previous_words(words[position + 1:], top_k=vocabulary_size)["previous_words"], "<S>")
        for side, full in (("forward", forward), ("backward", backward)):
            expected = sorted(full.items(), key=lambda item: -item[1])[:5]
            assert [entry["word"] for entry in found[side]] == [word for word, _ in expected]
            assert [entry["probability"] for entry in found[side]] == pytest.approx([p for _, p in expected], abs=1e-5)
        # Combined: the product of the two, renormalised over the words both can give.
        product = {word: forward[word] * backward[word] for word in forward.keys() & backward.keys()}
        total = sum(product.values())
        expected = sorted(product.items(), key=lambda item: -item[1])[:5]
        assert [entry["word"] for entry in found["combined"]] == [word for word, _ in expected]
        assert [entry["probability"] for entry in found["combined"]] == pytest.approx(
            [p / total for _, p in expected], abs=1e-5)


def test_substitutes_in_a_batch_equal_single_requests(predictor):
    requests = [{"sentence": SEEN, "substitutes": True, "top_k": 3}, {"prefix": "neural"},
                {"sentence": SEEN_TOO, "substitutes": True, "top_k": 3}]
    batched = predictor.predict_batch_json(requests)
    for request, output in zip(requests, batched):
        single = predictor.predict_json(request)
        if "substitutes" not in request:
            assert output["next_words"][0]["word"] == single["next_words"][0]["word"]
            continue
        assert output["tokens"] == single["tokens"]
        for ours, alone in zip(output["substitutes"], single["substitutes"]):
            for side in ("forward", "backward", "combined"):  # the same words, to float rounding
                assert [e["word"] for e in ours[side]] == [e["word"] for e in alone[side]]
                assert [e["probability"] for e in ours[side]] == pytest.approx(
                    [e["probability"] for e in alone[side]], abs=1e-6)
    with pytest.raises(ConfigurationError, match="'substitutes' is true or false, and goes with 'sentence'"):
        predictor.predict_json({"prefix": "neural", "substitutes": True})
