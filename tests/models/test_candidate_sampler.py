import numpy
import pytest
from allennlp.common.testing import AllenNlpTestCase
from allennlp.modules.sampled_softmax_loss import _choice

from elmo_plugin.models.candidate_sampler import log_uniform_without_replacement


class TestLogUniformWithoutReplacement(AllenNlpTestCase):
    @pytest.mark.parametrize("num_words, num_samples, seeds", [
        (3, 2, 40),  # every buffer boundary case many times over
        (10, 5, 40),
        (10, 9, 40),
        (50, 40, 20),
        (1000, 100, 10),
        (22219, 8192, 2),  # the Brown benchmark's vocabulary, bilm-tf's negatives
    ])
    def test_the_same_samples_tries_and_generator_state_as_allennlps_sampler(self, num_words, num_samples, seeds):
        for seed in range(seeds):
            numpy.random.seed(seed)
            expected, expected_tries = _choice(num_words, num_samples)
            expected_next = numpy.random.rand()
            numpy.random.seed(seed)
            ours, tries = log_uniform_without_replacement(num_words, num_samples)
            assert ours.dtype == expected.dtype and numpy.array_equal(ours, expected)  # the order too
            assert tries == expected_tries
            assert numpy.random.rand() == expected_next
