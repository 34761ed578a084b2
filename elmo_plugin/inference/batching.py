"""
Batches within a token budget: how many sentences are read at once is bounded by the token
positions they take, padding included, so that memory does not depend on the sentences given.
"""
from typing import List, Optional, Tuple


def rows_within_token_budget(
    lengths: List[int], max_tokens: int, max_rows: Optional[int] = None
) -> Tuple[List[List[int]], List[int]]:
    """
    The rows of sentences of `lengths` (in tokens) in groups whose padded size, rows x
    (longest + `<S>` + `</S>`), is within `max_tokens` (and of at most `max_rows` rows),
    shortest first so that little is padded; and the rows too long for any group, which are
    read in segments (`ElmoBiLm.read_in_segments`).
    """
    long_rows = [row for row, length in enumerate(lengths) if length + 2 > max_tokens]
    groups: List[List[int]] = []
    group: List[int] = []
    for row in sorted((row for row, length in enumerate(lengths) if length + 2 <= max_tokens), key=lengths.__getitem__):
        # Sorted ascending: the newest sentence is the longest, so it sets the padded size.
        if group and (len(group) == max_rows or (len(group) + 1) * (lengths[row] + 2) > max_tokens):
            groups.append(group)
            group = []
        group.append(row)
    if group:
        groups.append(group)
    return groups, long_rows
