"""One settings object for how a biLM runs, checked where it is made."""
import inspect

import pytest
from allennlp.common.checks import ConfigurationError

from elmo_plugin import Elmo, ElmoBiLm, ElmoEmbedder, ElmoSettings, ElmoTokenEmbedder


def test_bad_settings_are_refused_when_made():
    with pytest.raises(ConfigurationError, match="must be one of float32, bfloat16, int8; got 'fp8'"):
        ElmoSettings(precision="fp8")
    with pytest.raises(ConfigurationError, match="inference only"):
        ElmoSettings(requires_grad=True, precision="bfloat16")


def test_a_vocabulary_to_cache_is_kept_as_a_tuple():
    settings = ElmoSettings(vocab_to_cache=["@@PADDING@@", "the"])
    assert settings.vocab_to_cache == ("@@PADDING@@", "the")
    assert hash(settings) == hash(ElmoSettings(vocab_to_cache=("@@PADDING@@", "the")))


def test_the_public_classes_take_their_defaults_from_the_settings():
    for cls in (ElmoBiLm, Elmo, ElmoTokenEmbedder):
        parameters = inspect.signature(cls.__init__).parameters
        assert parameters["stateful"].default is ElmoSettings.stateful, cls
        assert parameters["precision"].default is ElmoSettings.precision, cls
    embedder = inspect.signature(ElmoEmbedder.__init__).parameters
    assert embedder["precision"].default is ElmoSettings.precision
    assert embedder["stateful"].default is False  # 0.9's numpy API: deterministic by default
