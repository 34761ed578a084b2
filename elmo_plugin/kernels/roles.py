"""
The biLM's matrix products by role, and which roles the fixed kernel table gives to oneDNN.
"""
import enum


class Role(enum.Enum):
    """The biLM's products, by the shapes they have (rows x inputs x outputs)."""

    LSTM_INPUT = "lstm input"  # (real tokens, input) x (input, 4 cell), once per layer
    LSTM_RECURRENT = "lstm recurrent"  # (running rows, hidden) x (hidden, 4 cell) + b, every step
    LSTM_PROJECTION = "lstm projection"  # (running rows, cell) x (cell, hidden), every step
    CHAR_CNN = "char cnn"  # (tokens x windows, width x char dim) x (.., filters) + b
    HIGHWAY = "highway"  # (tokens, filters) x (filters, 2 filters) + b
    CHAR_PROJECTION = "char projection"  # (tokens, filters) x (filters, projection) + b
    SAMPLED_SOFTMAX = "sampled softmax"  # (targets, projection) x (projection, samples), training


# The fixed table (`ELMO_PLUGIN_KERNEL_CHOICE=fixed`): oneDNN for the wide products; MKL for
# the projections, whose long sums oneDNN adds up less accurately (BENCHMARKS.md).
ONEDNN_ROLES = frozenset(
    {Role.LSTM_INPUT, Role.LSTM_RECURRENT, Role.HIGHWAY, Role.CHAR_CNN, Role.SAMPLED_SOFTMAX}
)
