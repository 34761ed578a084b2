"""
The `elmo_bilm` predictor: a trained biLM as a language model (next words, previous words,
sentence scores), for `allennlp predict` and for Python.
"""
import json
import math
from typing import Any, Dict, List, NoReturn, Tuple

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import JsonDict, sanitize
from allennlp.data import Batch, DatasetReader, Instance, TextFieldTensors, Token
from allennlp.models import Model
from allennlp.nn import util as nn_util
from allennlp.predictors.predictor import Predictor
from overrides import overrides

from elmo_plugin.data.bilm_corpus_reader import LM_NAMESPACE, BiLmCorpusReader
from elmo_plugin.data.bilm_vocabulary import SPECIAL_TOKENS
from elmo_plugin.models.bilm import ElmoBiLmModel

BOS, EOS, UNKNOWN = SPECIAL_TOKENS
# One JSON line asks for exactly one of these.
REQUEST_KEYS = ("prefix", "suffix", "sentence")


@Predictor.register("elmo_bilm")
class ElmoBiLmPredictor(Predictor):
    """
    Asks an `elmo_bilm` model (full softmax, no dropout) one of three things per JSON object.
    Text is a string split on whitespace (tokenise it as the biLM's corpus was) or a list of
    tokens; `top_k` defaults to 10.

    - `{"prefix": "the cat sat on the", "top_k": 5}` -> `next_words`: the forward LM's most
      probable next words, `[{"word", "probability"}, ...]`. `</S>` among them means "the
      sentence ends here". An empty prefix gives the distribution of a sentence's first word.
    - `{"suffix": "on the mat ."}` -> `previous_words`: the backward LM's most probable words
      before the suffix (`<S>`: the sentence starts there). An empty suffix gives the last word.
    - `{"sentence": "the cat sat ."}` -> its natural-log probability under each LM
      (`forward_log_prob` = sum of `forward_log_probs`, one per word and the closing `</S>`;
      `backward_log_prob` likewise with the opening `<S>`) and their mean `log_prob`; per word
      the surprisal in bits under each LM (`forward_surprisal`, `backward_surprisal`) and their
      mean (`surprisal`).
    - `{"sentence": "the cat sat .", "substitutes": true, "top_k": 5}` -> `substitutes`: for
      each word, what could stand there in context (lexical substitution, word-sense
      induction): the forward LM's top words from the left context (`forward`), the backward
      LM's from the right context (`backward`) and their combination (`combined`: the product
      of the two probabilities, renormalised over the vocabulary), from one pass over the
      sentence. `<S>` and `</S>` are never substitutes.

    Unknown words: the char CNN reads every word, so an out-of-vocabulary word in the context
    is used like any other. As a predicted or scored word it is `<UNK>`, which stands for all
    words outside the vocabulary together (`unknown` marks them in a sentence's output). `<S>`
    as a next word and `</S>` as a previous word are impossible and never listed.

    # Parameters

    model : `Model`
        An `ElmoBiLmModel`.
    dataset_reader : `DatasetReader`
        The archive's reader; the predictor reads sentences with a sentence-mode
        `elmo_bilm_corpus` reader whatever it is (a training reader usually packs windows).
    """

    def __init__(self, model: Model, dataset_reader: DatasetReader) -> None:
        if not isinstance(model, ElmoBiLmModel):
            raise ConfigurationError(
                f"The elmo_bilm predictor needs an elmo_bilm model, not {type(model).__name__}."
            )
        super().__init__(model.eval(), BiLmCorpusReader())
        self._words = model.vocab.get_index_to_token_vocabulary(LM_NAMESPACE)
        self._word_ids = model.vocab.get_token_to_index_vocabulary(LM_NAMESPACE)
        # `allennlp predict` hands this predictor its input's non-blank lines, in order.
        self._lines_read = 0

    def next_words(self, prefix: Any, top_k: int = 10) -> JsonDict:
        return self.predict_json({"prefix": prefix, "top_k": top_k})

    def previous_words(self, suffix: Any, top_k: int = 10) -> JsonDict:
        return self.predict_json({"suffix": suffix, "top_k": top_k})

    def score(self, sentence: Any) -> JsonDict:
        return self.predict_json({"sentence": sentence})

    def substitutes(self, sentence: Any, top_k: int = 10) -> JsonDict:
        return self.predict_json({"sentence": sentence, "substitutes": True, "top_k": top_k})

    @overrides
    def load_line(self, line: str) -> JsonDict:
        """One request per non-blank line of `allennlp predict`'s input; a line that is not JSON
        is refused with its number among those lines (blank lines are not counted)."""
        self._lines_read += 1
        try:
            return json.loads(line)
        except json.JSONDecodeError as error:
            raise ConfigurationError(
                f"elmo_bilm predictor: non-blank line {self._lines_read} of the input is not JSON "
                f"({error.msg} at column {error.colno}): {line.strip()[:80]!r}."
            ) from error

    @overrides
    def predict_json(self, inputs: JsonDict) -> JsonDict:
        return self.predict_batch_json([inputs])[0]

    @overrides
    def predict_batch_json(self, inputs: List[JsonDict]) -> List[JsonDict]:
        requests = [self._parse_request(json_dict) for json_dict in inputs]
        instances = [self._json_to_instance(json_dict) for json_dict in inputs]
        wants_substitutes = [json_dict.get("substitutes") is True for json_dict in inputs]
        scores = self._score_instances(instances) if not all(wants_substitutes) else {}
        substitute_instances = [instance for instance, wanted in zip(instances, wants_substitutes) if wanted]
        distributions = iter(self._word_distributions(substitute_instances)) if substitute_instances else iter(())
        outputs = []
        for index, (kind, words, top_k) in enumerate(requests):
            if wants_substitutes[index]:
                outputs.append(sanitize(self._substitutes(words, next(distributions), top_k)))
                continue
            row = {name: value[index] for name, value in scores.items()}
            if kind == "prefix":
                output = {"prefix": [t.text for t in words],
                          "next_words": self._top_words(row["next_word_log_probs"], top_k, BOS)}
            elif kind == "suffix":
                output = {"suffix": [t.text for t in words],
                          "previous_words": self._top_words(row["previous_word_log_probs"], top_k, EOS)}
            else:
                output = self._sentence_scores(words, row)
            outputs.append(sanitize(output))
        return outputs

    @overrides
    def _json_to_instance(self, json_dict: JsonDict) -> Instance:
        _, words, _ = self._parse_request(json_dict)
        instance = self._dataset_reader.text_to_instance(words)
        self._dataset_reader.apply_token_indexers(instance)
        return instance

    @staticmethod
    def _refuse(json_dict: Any, what: str) -> NoReturn:
        # The request itself, so that a user finds it among many lines (from Python it may hold
        # what JSON cannot: shown as Python shows it).
        shown = json.dumps(json_dict, default=repr)[:200]
        raise ConfigurationError(f"elmo_bilm predictor: {what} In the request {shown}")

    def _parse_request(self, json_dict: JsonDict) -> Tuple[str, List[Token], int]:
        if not isinstance(json_dict, dict):
            self._refuse(json_dict, f"expected a JSON object with one of {', '.join(REQUEST_KEYS)}.")
        kinds = [key for key in REQUEST_KEYS if key in json_dict]
        if len(kinds) != 1:
            self._refuse(
                json_dict,
                f"a request needs exactly one of {', '.join(REQUEST_KEYS)}; got the keys {sorted(json_dict)}.",
            )
        kind = kinds[0]
        text = json_dict[kind]
        if isinstance(text, str):
            words = text.split()
        elif isinstance(text, list) and all(isinstance(word, str) and word.strip() for word in text):
            words = list(text)
        else:
            self._refuse(json_dict, f"'{kind}' must be a string or a list of non-empty strings; got {text!r}.")
        substitutes = json_dict.get("substitutes", False)
        if not isinstance(substitutes, bool) or (substitutes and kind != "sentence"):
            self._refuse(
                json_dict,
                f"'substitutes' is true or false, and goes with 'sentence'; got {substitutes!r} with '{kind}'.",
            )
        top_k = json_dict.get("top_k", 10)
        if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
            self._refuse(json_dict, f"'top_k' must be a positive integer; got {top_k!r}.")
        return kind, [Token(word) for word in words], top_k

    def _model_tensors(self, instances: List[Instance]) -> TextFieldTensors:
        """The instances' token tensors, indexed and on the model's device."""
        dataset = Batch(instances)
        dataset.index_instances(self._model.vocab)
        return nn_util.move_to_device(dataset.as_tensor_dict(), self._model._get_prediction_device())["tokens"]

    def _score_instances(self, instances: List[Instance]) -> Dict[str, List[torch.Tensor]]:
        with torch.no_grad():
            scores = self._model.score_sentences(self._model_tensors(instances))  # type: ignore
        return {name: list(value.cpu()) for name, value in scores.items()}

    def _word_distributions(self, instances: List[Instance]) -> List[Dict[str, torch.Tensor]]:
        """Per instance: its words' forward and backward log-distributions, (n, vocabulary)."""
        with torch.no_grad():
            result = self._model.word_distributions(self._model_tensors(instances))  # type: ignore
        rows = []
        for index, length in enumerate(result["mask"].sum(dim=1).tolist()):
            rows.append({name: result[name][index, :length].cpu() for name in ("forward_log_probs", "backward_log_probs")})
        return rows

    def _substitutes(self, words: List[Token], row: Dict[str, torch.Tensor], top_k: int) -> JsonDict:
        boundaries = [self._word_ids[BOS], self._word_ids[EOS]]
        forward, backward = row["forward_log_probs"].clone(), row["backward_log_probs"].clone()
        forward[:, boundaries] = -math.inf
        backward[:, boundaries] = -math.inf
        # The product of the two probabilities, renormalised: log-softmax of the sum.
        combined = torch.log_softmax(forward + backward, dim=-1)
        positions = []
        for position, word in enumerate(words):
            positions.append({
                "word": word.text,
                "forward": self._top_words(forward[position], top_k, BOS),
                "backward": self._top_words(backward[position], top_k, EOS),
                "combined": self._top_words(combined[position], top_k, BOS),
            })
        return {"tokens": [t.text for t in words], "substitutes": positions}

    def _top_words(self, log_probs: torch.Tensor, top_k: int, impossible: str) -> List[JsonDict]:
        probabilities = log_probs.exp()
        probabilities[self._word_ids[impossible]] = 0.0
        values, indices = probabilities.topk(min(top_k, probabilities.numel() - 1))
        return [{"word": self._words[int(i)], "probability": float(p)} for p, i in zip(values, indices)]

    def _sentence_scores(self, words: List[Token], row: Dict[str, torch.Tensor]) -> JsonDict:
        length = int(row["mask"].sum())  # the words and one boundary
        forward = row["forward_log_probs"][:length].tolist()
        backward = row["backward_log_probs"][:length].tolist()
        texts = [t.text for t in words]
        # Surprisal of each word in bits: forward scores words at 0..n-1, backward at 1..n.
        forward_surprisal = [-value / math.log(2) for value in forward[:-1]]
        backward_surprisal = [-value / math.log(2) for value in backward[1:]]
        return {
            "tokens": texts,
            "unknown": [text not in self._word_ids for text in texts],
            "forward_tokens": texts + [EOS],
            "forward_log_probs": forward,
            "backward_tokens": [BOS] + texts,
            "backward_log_probs": backward,
            "forward_log_prob": sum(forward),
            "backward_log_prob": sum(backward),
            "log_prob": 0.5 * (sum(forward) + sum(backward)),
            "forward_surprisal": forward_surprisal,
            "backward_surprisal": backward_surprisal,
            "surprisal": [0.5 * (f + b) for f, b in zip(forward_surprisal, backward_surprisal)],
        }
