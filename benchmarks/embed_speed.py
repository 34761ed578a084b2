"""
Embedding speed of our `ElmoBiLm` against AllenNLP's `_ElmoBiLm`, interleaved in one process.

    python benchmarks/embed_speed.py [--passes 3] [--batch-sizes 1 16 64] [--threads 2]
    python benchmarks/embed_speed.py --device cuda --batch-sizes 1 16 64 256

Both load the same random weights of the original ELMo architecture
(2x4096_512_2048cnn_2xhighway, written in the published layout) and embed the same 20-30 token
WikiText-2 sentences with carried state, in float32. For every batch size and pass the two run
back to back (AllenNLP first, then ours), so machine drift hits both alike; the figure that
counts is the ratio. Also printed: the largest difference between the two outputs, the peak
resident memory of the process (both models loaded) during one forward pass of each (Linux
`clear_refs` resets the peak counter), and
the fraction of the compute limit reached, from a float32 GEMM rate measured here on the LSTM's
recurrent shape with the product our code uses (`Kernels`: oneDNN on the CPU).

The opt-in reduced precisions (`--precisions bfloat16 int8`, both by default) run in the same
passes from the same weights: tokens/s, ratios to AllenNLP and to our float32, and their
fidelity (per biLM layer, the mean cosine of each token's vector to our float32 vector; the
smallest of those means is printed). `--serial-directions` adds ours with the two directions
run one after the other (`ElmoLstm.parallel_directions = False`), to measure what running them
side by side gains. `--without-cuda-graphs` adds ours on a GPU with `ElmoLstm.cuda_graphs` off
(every LSTM step launched from Python, as before the graphs), to measure what they gain.

On a GPU (`--device cuda`) the same comparison runs there: float32 with TF32 turned off for
both (cuDNN's convolutions would otherwise use it), bfloat16 as the opt-in precision (int8 is
CPU only), timings after `torch.cuda.synchronize()`, and peak memory as the GPU memory
allocated during one forward pass on top of what the loaded models hold.
"""
import sys
import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import torch

# The repository root, for the tests' random-weight helper.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import elmo_plugin  # noqa: F401
from elmo_plugin import ElmoBiLm, batch_to_ids
from elmo_plugin.kernels import choice
from elmo_plugin.kernels.products import Kernels, Role
from elmo_plugin.weights.options import ElmoOptions
from elmo_plugin.weights.pretrained import ORIGINAL_OPTIONS
from tests.random_weights import write_random_elmo  # noqa: E402

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"


def sentences(count: int, path: Path) -> List[List[str]]:
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        tokens = line.split()
        if 20 <= len(tokens) <= 30 and not line.lstrip().startswith("="):
            found.append(tokens)
    return [found[i % len(found)] for i in range(count)]


def flops_per_position(options: ElmoOptions) -> float:
    """Multiply-adds x 2 of one token through the char CNN, highway, projection and LSTMs."""
    characters = options.max_characters_per_token
    cnn = sum(2 * w * options.char_embedding_dim * n * (characters - w + 1) for w, n in options.filters)
    n = options.n_filters
    highway = options.n_highway * 2 * n * 2 * n
    projection = 2 * n * options.projection_dim
    p, c = options.projection_dim, options.cell_dim
    lstm = 2 * options.n_layers * (2 * p * 4 * c + 2 * p * 4 * c + 2 * c * p)
    return float(cnn + highway + projection + lstm)


class WithFixedKernels(torch.nn.Module):
    """A biLM whose products come from the fixed table (`ELMO_PLUGIN_KERNEL_CHOICE=fixed`)
    rather than the kernels chosen on this machine: the two side by side in one run."""

    def __init__(self, bilm: ElmoBiLm) -> None:
        super().__init__()
        self.bilm = bilm

    def reset_states(self) -> None:
        self.bilm.reset_states()

    def forward(self, ids: torch.Tensor):
        choice.set_mode(choice.FIXED)
        try:
            return self.bilm(ids)
        finally:
            choice.set_mode(None)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gemm_rate(batch: int, options: ElmoOptions, device: torch.device, repeats: int = 20) -> float:
    """
    GFLOP/s of the LSTM's recurrent product, (batch, p) x (p, 4c), the dominant shape, with the
    product our code uses for it from batches of 2 up (`Kernels`: oneDNN on the CPU).
    """
    state = torch.randn(batch, options.projection_dim, device=device)
    layer = torch.nn.Linear(options.projection_dim, 4 * options.cell_dim, bias=False).to(device)
    product = Kernels().product(Role.LSTM_RECURRENT, layer)
    for _ in range(3):
        product(state)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        product(state)
    synchronize(device)
    seconds = (time.perf_counter() - start) / repeats
    return 2 * batch * options.projection_dim * 4 * options.cell_dim / seconds / 1e9


def peak_memory_mb_during(function, device: torch.device) -> float:
    """CPU: the process's peak resident memory; GPU: memory allocated on top of the models."""
    if device.type == "cuda":
        synchronize(device)
        resident = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        function()
        synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - resident) / 2**20
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return float("nan")
    function()
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches-per-pass", type=int, default=2)
    parser.add_argument("--precisions", nargs="*", default=None,
                        help="opt-in reduced precisions to time and compare with float32 "
                             "(default: bfloat16 and int8 on the CPU, bfloat16 on a GPU)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda[:N]")
    parser.add_argument("--serial-directions", action="store_true",
                        help="also time ours with ElmoLstm.parallel_directions off")
    parser.add_argument("--without-cuda-graphs", action="store_true",
                        help="also time ours on the GPU with ElmoLstm.cuda_graphs off")
    parser.add_argument("--sentences-file", type=Path,
                        default=SHARED / "data" / "lm_eval" / "wikitext2.valid.txt")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.precisions is None:
        args.precisions = ["bfloat16", "int8"] if device.type == "cpu" else ["bfloat16"]
    torch.set_num_threads(args.threads)
    # float32 means float32 on a GPU too: no TF32 in cuDNN's convolutions or cuBLAS.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    from allennlp.modules.elmo import _ElmoBiLm

    with tempfile.TemporaryDirectory() as work:
        options_file, weight_file = write_random_elmo(work, ORIGINAL_OPTIONS, seed=0)
        options = ElmoOptions.from_file(options_file)
        models = {
            "allennlp": _ElmoBiLm(options_file, weight_file).eval().to(device),
            "ours": ElmoBiLm(options_file, weight_file).eval().to(device),
        }
        for precision in args.precisions:
            models[f"ours {precision}"] = (
                ElmoBiLm(options_file, weight_file, precision=precision).eval().to(device)
            )
        if device.type == "cpu" and choice.mode() == choice.MEASURE:
            models["ours fixed kernels"] = WithFixedKernels(ElmoBiLm(options_file, weight_file).eval())
        if args.serial_directions:
            models["ours serial directions"] = ElmoBiLm(options_file, weight_file).eval().to(device)
            models["ours serial directions"].lstm.parallel_directions = False
        if args.without_cuda_graphs:
            models["ours without cuda graphs"] = ElmoBiLm(options_file, weight_file).eval().to(device)
            models["ours without cuda graphs"].lstm.cuda_graphs = False
    flops = flops_per_position(options)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{args.threads} threads"
    memory = "peak GPU MB over models" if device.type == "cuda" else "peak RSS MB"
    print(f"original architecture, random weights, float32, {where}, "
          f"{flops / 1e6:.0f} MFLOP per position; CPU: {cpu_description()}; kernel choice: {choice.mode()}")
    print(f"{'batch':>5} {'allennlp tok/s':>15} {'ours tok/s':>11} {'ratio':>6} {'max |diff|':>11} "
          f"{memory + ' allennlp':>21} {'ours':>6} {'GEMM GFLOP/s':>13} {'ours % of limit':>16}")
    for batch_size in args.batch_sizes:
        data = sentences(batch_size * args.batches_per_pass, args.sentences_file)
        batches = [
            batch_to_ids(data[i : i + batch_size]).to(device) for i in range(0, len(data), batch_size)
        ]
        tokens = sum(len(s) for s in data)
        rates: Dict[str, List[float]] = {name: [] for name in models}
        models["allennlp"]._elmo_lstm.reset_states()
        for name, model in models.items():
            if name != "allennlp":
                model.reset_states()
        difference = 0.0
        cosines: Dict[str, List[float]] = {name: [] for name in models if name.startswith("ours ")}
        peaks = {}
        for pass_index in range(args.passes):
            outputs = {}
            for name, model in models.items():
                synchronize(device)
                start = time.perf_counter()
                outputs[name] = [model(ids)["activations"] for ids in batches]
                synchronize(device)
                rates[name].append(tokens / (time.perf_counter() - start))
            for ours, theirs in zip(outputs["ours"], outputs["allennlp"]):
                for a, b in zip(ours, theirs):
                    difference = max(difference, (a - b).abs().max().item())
            for name in cosines:
                for ours, reduced in zip(outputs["ours"], outputs[name]):
                    mask = ours[0].abs().sum(-1) > 0  # layer 0 is zero exactly at padding
                    for a, b in zip(ours, reduced):  # per layer: mean cosine over tokens
                        cosines[name].append(float(
                            torch.nn.functional.cosine_similarity(a[mask], b[mask], dim=-1).mean()))
        for name, model in models.items():
            peaks[name] = peak_memory_mb_during(lambda: model(batches[0]), device)
        allennlp_rate = statistics.median(rates["allennlp"])
        our_rate = statistics.median(rates["ours"])
        gflops = gemm_rate(batch_size, options, device)
        limit = gflops * 1e9 / flops
        print(f"{batch_size:>5} {allennlp_rate:>15.1f} {our_rate:>11.1f} {our_rate / allennlp_rate:>6.2f} "
              f"{difference:>11.2e} {peaks['allennlp']:>21.0f} {peaks['ours']:>6.0f} {gflops:>13.1f} "
              f"{100 * our_rate / limit:>15.0f}%")
        for name in cosines:
            rate = statistics.median(rates[name])
            print(f"{'':>5} {name}: {rate:.1f} tok/s, {rate / allennlp_rate:.2f}x AllenNLP, "
                  f"{rate / our_rate:.2f}x ours float32; cosine to float32 per layer and token: "
                  f"min of layer means {min(cosines[name]):.5f}; {memory} {peaks[name]:.0f}")
    if choice.mode() == choice.MEASURE and device.type == "cpu":
        print(f"kernels chosen on this CPU (cache {choice.CACHE_PATH}):")
        for name, label in sorted(choice._decisions.items()):
            print(f"  {name}: {label}")


def cpu_description() -> str:
    """The CPU's model, core count and vector flags: what every figure must be read with."""
    import os
    import re

    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"model name\s*:\s*(.*)", text)
    flags = sorted(set(re.findall(r"\b(avx512\w*|avx2|fma|amx\w*)\b", text)))
    return f"{model.group(1) if model else 'unknown'}, {os.cpu_count()} cores ({' '.join(flags)})"


if __name__ == "__main__":
    main()
