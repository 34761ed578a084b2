"""
Work captured once as a CUDA graph and replayed: one launch instead of hundreds.

On a GPU the biLM's LSTM steps are small kernels (a few rows each), and the host issuing them
one by one, not the GPU, sets the pace (BENCHMARKS.md, "On a GPU"). A CUDA graph records the
kernels of a piece of work once, with the addresses of every tensor it reads and writes, and
replays them in one launch. So the work must read and write the same tensors every time: the
caller keeps buffers per shape, copies each call's values into them, and copies the results
out before the next replay of any graph of the cache (the graphs share one memory pool, so
the intermediates of one may lie where another's results were).
"""
from typing import Any, Callable, Dict, Hashable, Optional, Sequence, Tuple

import torch


class GraphCache:
    """
    Captured graphs by key. The key must name everything the work depends on that is not in
    its buffers: shapes, dtypes, the weights' identities and versions, the precision.

    Copies (`deepcopy`, pickling) start empty: graphs are tied to the tensors they were
    captured with.
    """

    def __init__(self) -> None:
        self._graphs: Dict[Hashable, Tuple[torch.cuda.CUDAGraph, Any, Callable[[], Any]]] = {}
        self._pool: Optional[Tuple[int, int]] = None
        self._stream: Optional[torch.cuda.Stream] = None

    def __getstate__(self) -> Dict[str, Any]:
        return {}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__()

    def __len__(self) -> int:
        return len(self._graphs)

    def clear(self) -> None:
        """Forgets every graph (and frees the memory only they held)."""
        self._graphs.clear()
        self._pool = None

    def replay(self, key: Hashable, work: Callable[[], Any], mutated: Sequence[torch.Tensor]) -> Any:
        """
        The results of `work()`, from its graph under `key`, captured at the first call.

        # Parameters

        key : `Hashable`
            Names the work and what it reads besides its buffers (see the class).
        work : `Callable[[], Any]`
            Reads and writes only tensors that stay alive and in place (the caller's buffers,
            the weights); no host synchronisation, nothing random. Kept with the graph, so
            whatever it holds (a derived weight copy) stays alive as long as the graph.
        mutated : `Sequence[torch.Tensor]`
            The buffers `work` writes in place. The capture runs `work` once for real first
            (what the CUDA documentation asks for: libraries' lazy set-up must not happen
            inside a capture), so these are restored before the graph runs it again.

        # Returns

        What `work` returned at the capture: tensors the graph overwrites at every replay.
        """
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._graphs[key] = self._capture(work, mutated)
        graph, results, _ = entry
        graph.replay()
        return results

    def _capture(
        self, work: Callable[[], Any], mutated: Sequence[torch.Tensor]
    ) -> Tuple[torch.cuda.CUDAGraph, Any, Callable[[], Any]]:
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        saved = [tensor.clone() for tensor in mutated]
        self._stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._stream):
            work()
        torch.cuda.current_stream().wait_stream(self._stream)
        for tensor, value in zip(mutated, saved):
            tensor.copy_(value)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, stream=self._stream):
            results = work()
        return graph, results, work
