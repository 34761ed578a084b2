"""
The negative samples of AllenNLP's `SampledSoftmaxLoss`, drawn a buffer at a time instead of a
draw at a time.
"""
from typing import Tuple

import numpy


def log_uniform_without_replacement(num_words: int, num_samples: int) -> Tuple[numpy.ndarray, int]:
    """
    `num_samples` distinct word ids from the log-uniform (Zipfian) distribution over
    `[0, num_words)` and the number of draws it took: what AllenNLP's sampler
    (`allennlp.modules.sampled_softmax_loss._choice`) returns, the same ids in the same order
    from the same random numbers of numpy's global generator, leaving it in the same state.
    AllenNLP's looks at the draws one by one in Python (tens of thousands per batch for a
    vocabulary of tens of thousands of words, twice per biLM step); here each buffer of draws
    is looked at in a few array operations.

    # Parameters

    num_words : `int`
        The vocabulary size.
    num_samples : `int`
        How many distinct ids (fewer than `num_words`).

    # Returns

    The ids, `(num_samples,)` int64, and the number of draws until the last of them.
    """
    log_range = numpy.log(num_words + 1)
    positions = numpy.arange(num_samples, dtype=numpy.int32)
    seen = numpy.zeros(num_words, dtype=bool)
    # Each id's first position in the current buffer; `num_samples` (past the end) elsewhere.
    first_position = numpy.full(num_words, num_samples, dtype=numpy.int32)
    chosen = []  # arrays of new ids, in the order they were first drawn
    still_needed = num_samples
    drawn = 0
    while True:
        # AllenNLP's buffer: `num_samples` draws at a time.
        buffer = numpy.exp(numpy.random.rand(num_samples) * log_range).astype("int64") - 1
        buffer = numpy.clip(buffer, a_min=0, a_max=num_words - 1)
        # The draws at their id's first position, of ids not chosen before: the new ids, in
        # draw order.
        numpy.minimum.at(first_position, buffer, positions)
        is_new = (first_position[buffer] == positions) & ~seen[buffer]
        first_position[buffer] = num_samples
        new_positions = numpy.flatnonzero(is_new)[:still_needed]
        chosen.append(buffer[new_positions])
        seen[chosen[-1]] = True
        if len(new_positions) == still_needed:
            last_position = int(new_positions[-1])
            num_tries = drawn + last_position + 1
            if last_position == num_samples - 1:
                # AllenNLP refills its buffer after using its last draw, done or not.
                numpy.random.rand(num_samples)
            break
        still_needed -= len(new_positions)
        drawn += num_samples
    # AllenNLP returns the ids in the order of its Python set, which depends on the order
    # they were added in.
    return numpy.array(list(set(numpy.concatenate(chosen).tolist())), dtype=numpy.int64), num_tries
