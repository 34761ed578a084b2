"""
Reading one long sentence in segments, so that memory is bounded by the segment, not by the
sentence: a 30,000-token sentence (a protein, a document read as one sequence) needs, read
whole, every LSTM layer's gate inputs for every position at once.

The biLM's two directions never see each other, so a sentence is read twice: forward over its
segments in order, and backward over them in reverse order (side by side on the CPU, as
`ElmoLstm` runs its directions), each direction's LSTM state carried from segment to segment
exactly as it would pass from one position to the next. Each direction computes the token
layer of its segments itself (it is per token, and cheap beside the LSTMs) rather than keep
the sentence's. Each segment's layers go to a sink as soon as they are computed; the caller
decides where (an array, an HDF5 dataset).

`<S>` and `</S>` are read as in `ElmoBiLm.forward`; the sink sees only the sentence's own
tokens, as `(layers, tokens)` of one direction's half of every layer: the token layer (the
same in both halves) and each LSTM layer of that direction.
"""
from typing import Callable, List, Tuple

import torch

from elmo_plugin.kernels import threads
from elmo_plugin.modules.start_state import LstmState

# (direction, first token, last token + 1, one (tokens, hidden) tensor per layer)
SegmentSink = Callable[[str, int, int, List[torch.Tensor]], None]
FORWARD, BACKWARD = "forward", "backward"


def direction_columns(direction: str, output_dim: int) -> slice:
    """The columns of a `(.., output_dim)` biLM layer that hold `direction`'s half."""
    half = output_dim // 2
    return slice(0, half) if direction == FORWARD else slice(half, output_dim)


@torch.no_grad()
def read_in_segments(
    bilm: torch.nn.Module,
    tokens: List[str],
    initial_state: LstmState,
    segment_tokens: int,
    sink: SegmentSink,
) -> LstmState:
    """
    Reads `tokens` (one sentence) with `bilm` (an `ElmoBiLm` in eval mode), `segment_tokens`
    positions at a time, from `initial_state` (`(h, c)` of shapes `(num_layers, 1, 2 * hidden)`
    and `(num_layers, 1, 2 * cell)`, forward half first), giving every segment's layers to
    `sink`. Returns the final state in the same layout: the forward direction's after `</S>`,
    the backward direction's after `<S>`, as `ElmoLstm` returns it.
    """
    if segment_tokens < 1:
        raise ValueError(f"segment_tokens must be positive, got {segment_tokens}")
    lstm = bilm.lstm
    hidden, cell = lstm.hidden_size, lstm.cell_size
    reference = next(bilm.parameters())
    # `<S>` and `</S>`: the token layer adds them to any sentence, here an empty one.
    boundaries = bilm.token_embedder(bilm.character_ids([[]]).to(reference.device))["token_embedding"][0]
    num_positions = len(tokens) + 2
    segments = [(start, min(start + segment_tokens, num_positions)) for start in range(0, num_positions, segment_tokens)]

    def token_layer(start: int, stop: int) -> torch.Tensor:
        """(1, stop - start, projection_dim) for positions start..stop of `<S> tokens </S>`."""
        parts = []
        if start == 0:
            parts.append(boundaries[:1])
        first, last = max(start, 1) - 1, min(stop, num_positions - 1) - 1
        if last > first:
            ids = bilm.character_ids([tokens[first:last]]).to(reference.device)
            parts.append(bilm.embed_character_ids(ids)[0])
        if stop == num_positions:
            parts.append(boundaries[1:])
        return torch.cat(parts).unsqueeze(0)

    def read(direction: str) -> Tuple[torch.Tensor, torch.Tensor]:
        """One direction over all segments; its final `(h, c)`, `(num_layers, 1, size)`."""
        forward = direction == FORWARD
        cells = lstm.forward_layers if forward else lstm.backward_layers
        halves = (slice(0, hidden), slice(0, cell)) if forward else (slice(hidden, None), slice(cell, None))
        states: List[Tuple[torch.Tensor, torch.Tensor]] = [
            (initial_state[0][layer, :, halves[0]], initial_state[1][layer, :, halves[1]])
            for layer in range(len(cells))
        ]
        for start, stop in segments if forward else segments[::-1]:
            inputs = token_layer(start, stop)
            mask = torch.ones(1, stop - start, dtype=torch.bool, device=inputs.device)
            layers = [inputs[0]]
            for index, lstm_cell in enumerate(cells):
                output, states[index] = lstm_cell(inputs, mask, states[index])
                if index > 0 and lstm.use_skip_connections:
                    output = output + inputs
                layers.append(output[0])
                inputs = output
            # Without `<S>` and `</S>`: positions 1 .. len(tokens) are the tokens 0 ...
            keep_from, keep_to = max(start, 1), min(stop, num_positions - 1)
            if keep_to > keep_from:
                sink(direction, keep_from - 1, keep_to - 1,
                     [layer[keep_from - start : keep_to - start] for layer in layers])
        return torch.stack([state for state, _ in states]), torch.stack([memory for _, memory in states])

    # Side by side where `ElmoLstm` runs a sentence's directions so (the sink is then called
    # from two threads, each with its own half of every layer).
    if lstm.directions_side_by_side(1, reference):
        forward_final, backward_final = threads.run_side_by_side(lambda: read(FORWARD), lambda: read(BACKWARD))
    else:
        forward_final, backward_final = read(FORWARD), read(BACKWARD)
    return (torch.cat([forward_final[0], backward_final[0]], dim=-1),
            torch.cat([forward_final[1], backward_final[1]], dim=-1))
