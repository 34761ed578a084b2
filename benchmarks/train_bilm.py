"""
Training the biLM on this machine: throughput and a real (short) run.

1. speed: training steps of the `elmo_bilm` model with the published small architecture
   (2x1024_128_2048cnn_1xhighway; `--architecture original`: 2x4096_512_2048cnn_2xhighway)
   and bilm-tf's recipe (windows of 20, sampled softmax with
   8192 negatives, Adagrad, gradient clipping) on Brown text: predicted tokens per second
   (forward-direction positions, bilm-tf's count), and the fraction of the compute limit,
   i.e. 3x the forward FLOPs of those steps divided by the time the measured matrix-product
   rate would need.
2. perplexity: the same model trained for a fixed number of steps from a seed, then its
   full-softmax perplexity on held-out Brown sentences: run before and after a change to
   training, with two seeds, to see whether it moved beyond seed noise.
3. brown: train that model on the Brown corpus (tags stripped, vocabulary = words seen 3+
   times) for a fixed time budget, then the full-softmax perplexity on the WikiText-2 and
   PTB test sets, read as 64 streams with carried state (bilm-tf's run_test.py reads one),
   and on held-out Brown sentences.
4. memory: a long run of training steps (the `speed` setting), with the process's peak RSS,
   tokens/s and page faults per step at every `--report-every` steps: what the C allocator's
   setting (`ELMO_PLUGIN_MALLOC`, `elmo_plugin/kernels/allocation.py`) costs and gains over
   hundreds of steps, which a `speed` run's few steps do not show. What one step's peak holds,
   tensor by tensor: `benchmarks/training_step_memory.py`.

    python benchmarks/train_bilm.py speed --streams 32 --steps 15 --warmup 5
    python benchmarks/train_bilm.py speed --device cuda --architecture original --streams 128
    python benchmarks/train_bilm.py speed --device cuda --streams 128 --without-cuda-graphs  # the step loop
    python benchmarks/train_bilm.py speed --streams 32 --steps 10 --profile
    python benchmarks/train_bilm.py speed --device cuda --streams 128 --profile  # + the GPU's busy share
    python benchmarks/train_bilm.py perplexity --steps 150 --seed 0
    python benchmarks/train_bilm.py speed --streams 32 --precision bfloat16
    python benchmarks/train_bilm.py speed --streams 32 --optimizer adagrad
    python benchmarks/train_bilm.py brown --minutes 30 --streams 32
    ELMO_PLUGIN_MALLOC=system python benchmarks/train_bilm.py memory --streams 32 --steps 400
    python benchmarks/train_bilm.py memory --architecture original --streams 32 --steps 200

Needs ../shared/data (brown.zip, lm_eval/).
"""
import argparse
import copy
import os
import random
import resource
import tempfile
import time
import zipfile
from typing import Dict, List, Tuple

import numpy
import torch
from allennlp.common import Params
from allennlp.data.data_loaders import SimpleDataLoader
from allennlp.training.optimizers import Optimizer
from allennlp.training.util import evaluate
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity

from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader
from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary
from elmo_plugin.kernels import allocation, onednn
from elmo_plugin.kernels.recorded_products import TRAINING_PRECISIONS
from elmo_plugin.models.bilm import ElmoBiLmModel
from elmo_plugin.modules.distinct_rows import distinct_rows
from elmo_plugin.weights.options import ElmoOptions
from elmo_plugin.weights.pretrained import ARCHITECTURE_OPTIONS

SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
OUTPUT = os.path.join(os.path.dirname(__file__), "output")  # git-ignored
WINDOW_SIZE = 20
NUM_SAMPLES = 8192


def brown_sentences() -> List[str]:
    """Brown's sentences (one per line in its files), `word/tag` -> `word`."""
    sentences = []
    with zipfile.ZipFile(os.path.join(SHARED_DATA, "brown.zip")) as archive:
        for name in sorted(archive.namelist()):
            base = os.path.basename(name)
            if len(base) != 4 or not base[:2].isalpha():  # text files are ca01 ... cr09
                continue
            for line in archive.read(name).decode("utf-8").splitlines():
                words = [token.rsplit("/", 1)[0] for token in line.split()]
                if words:
                    sentences.append(" ".join(words))
    return sentences


def write_lines(directory: str, name: str, lines: List[str]) -> str:
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"{line}\n" for line in lines)
    return path


def gemm_rate(rounds: int = 3) -> Dict[str, float]:
    """GFLOP/s of float32 matrix products, the best of `rounds`: a large square one and the
    LSTM's and highway's shapes, by MKL (`torch.mm`) and by oneDNN (where this torch has it):
    the machine's limit is the faster (on AMD CPUs MKL runs its AVX2 code only)."""
    rates: Dict[str, float] = {}
    for label, (m, k, n) in {
        "square 2048": (2048, 2048, 2048),
        "lstm 640x128x4096": (640, 128, 4096),
        "highway 4096x2048x4096": (4096, 2048, 4096),
    }.items():
        a, b = torch.randn(m, k), torch.randn(k, n)
        kernels = {"MKL": lambda: a @ b}
        if onednn.available():
            b_t = b.t().contiguous()
            kernels["oneDNN"] = lambda: onednn.linear(a, b_t, None)
        for kernel, product in kernels.items():
            for _ in range(2):
                product()
            repeats = 5
            for _ in range(rounds):
                start = time.perf_counter()
                for _ in range(repeats):
                    product()
                rate = 2 * m * k * n * repeats / (time.perf_counter() - start) / 1e9
                rates[f"{label}, {kernel}"] = max(rate, rates.get(f"{label}, {kernel}", 0.0))
    return rates


def forward_flops(options: ElmoOptions, distinct_tokens: int, positions: int) -> float:
    """Matrix-product FLOPs of one training forward pass (elementwise work ignored)."""
    cnn = sum(
        2 * width * options.char_embedding_dim * num * (options.max_characters_per_token - width + 1)
        for width, num in options.filters
    )
    highway = options.n_highway * 2 * options.n_filters * 2 * options.n_filters
    projection = 2 * options.n_filters * options.projection_dim
    encoder = distinct_tokens * (cnn + highway + projection)
    cell = options.cell_dim
    lstm_per_position = options.n_layers * (
        2 * options.projection_dim * 4 * cell  # input projection
        + 2 * options.projection_dim * 4 * cell  # recurrent projection
        + 2 * cell * options.projection_dim  # output projection
    )
    softmax_per_position = 2 * options.projection_dim * (NUM_SAMPLES + 1)
    return encoder + 2 * positions * (lstm_per_position + softmax_per_position)


def architecture_name(options: ElmoOptions) -> str:
    """The published files' name for an architecture, e.g. 2x4096_512_2048cnn_2xhighway."""
    return (f"{options.n_layers}x{options.cell_dim}_{options.projection_dim}_{options.n_filters}cnn_"
            f"{options.n_highway}xhighway")


def make_model(vocabulary, seed: int = 0, precision: str = "float32",
               architecture: str = "small") -> ElmoBiLmModel:
    torch.manual_seed(seed)
    numpy.random.seed(seed)
    return ElmoBiLmModel(vocabulary, options=copy.deepcopy(ARCHITECTURE_OPTIONS[architecture]), dropout=0.1,
                         num_samples=NUM_SAMPLES, training_precision=precision)


def make_optimizer(model: ElmoBiLmModel, name: str = "fused_adagrad") -> Optimizer:
    """bilm-tf's Adagrad as the configs build it (`name`: the registered optimizer)."""
    return Optimizer.from_params(
        model_parameters=list(model.named_parameters()),
        params=Params({"type": name, "lr": 0.2, "initial_accumulator_value": 1.0}),
    )


def train_steps(model, data_loader, optimizer, max_steps=None, max_seconds=None):
    """bilm-tf's step: loss, backward, global-norm clip at 10, Adagrad. Yields per-step facts
    (on a GPU each step's time ends when the GPU has finished it)."""
    model.train()
    device = next(model.parameters()).device
    step = 0
    start = time.perf_counter()
    record = torch.autograd.profiler.record_function
    for batch in data_loader:
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        step_start = time.perf_counter()
        faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        optimizer.zero_grad()
        with record("step: forward"):
            output = model(**batch)
        with record("step: backward"):
            output["loss"].backward()
        with record("step: clip and optimizer"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        step += 1
        forward_ids = batch["forward_tokens"]["elmo"]["elmo_tokens"][:, :-1]
        backward_ids = batch["backward_tokens"]["elmo"]["elmo_tokens"][:, 1:]
        all_ids = torch.cat([forward_ids, backward_ids]).reshape(-1, forward_ids.size(-1))
        yield {
            "seconds": time.perf_counter() - step_start,
            "page_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before,
            "positions": int((forward_ids > 0).any(-1).sum()),
            "distinct_tokens": int(distinct_rows(all_ids)[0].size(0)),
            "loss": float(output["loss"].detach()),
            "peak_rss_mb_before": rss_before,
            "peak_rss_mb_after": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
        if max_steps is not None and step >= max_steps:
            return
        if max_seconds is not None and time.perf_counter() - start > max_seconds:
            return


def prepare_brown(directory: str, heldout: int = 500) -> Tuple[str, str, BiLmVocabulary]:
    sentences = brown_sentences()
    random.Random(0).shuffle(sentences)
    train_path = write_lines(directory, "brown_train.txt", sentences[heldout:])
    heldout_path = write_lines(directory, "brown_heldout.txt", sentences[:heldout])
    reader = BiLmCorpusReader()
    vocabulary = BiLmVocabulary.from_bilm_corpus(
        instances=reader.read(train_path), min_count=3
    )
    return train_path, heldout_path, vocabulary


def training_loader(path: str, vocabulary, streams: int, seed: int = 0, device: str = "cpu"):
    random.seed(seed)  # the reader's shuffling seed: the same windows in every run
    reader = BiLmCorpusReader(window_size=WINDOW_SIZE, num_streams=streams, shuffle=True)
    loader = SimpleDataLoader.from_dataset_reader(reader, path, batch_size=streams)
    loader.index_with(vocabulary)
    loader.set_target_device(torch.device(device))
    return loader


def brown_training(directory: str, streams: int, seed: int = 0, precision: str = "float32",
                   optimizer_name: str = "fused_adagrad", architecture: str = "small", device: str = "cpu",
                   cuda_graphs: bool = True, **limits):
    """
    Brown prepared in `directory` and a fresh model: `(model, vocabulary, steps, train_path,
    heldout_path)`, where `steps` is `train_steps` within `limits`, not yet started (a
    generator: the caller decides what it measures around each step).
    """
    train_path, heldout_path, vocabulary = prepare_brown(directory)
    model = make_model(vocabulary, seed, precision, architecture).to(device)
    model.bilm.lstm.cuda_graphs = cuda_graphs
    optimizer = make_optimizer(model, optimizer_name)
    loader = training_loader(train_path, vocabulary, streams, seed, device)
    return model, vocabulary, train_steps(model, loader, optimizer, **limits), train_path, heldout_path


def model_settings(args) -> Dict[str, str]:
    """The command line's model and optimizer, as `brown_training` takes them."""
    return {"precision": args.precision, "optimizer_name": args.optimizer, "architecture": args.architecture,
            "device": args.device, "cuda_graphs": not args.without_cuda_graphs}


def train_on_brown(directory: str, streams: int, **settings):
    """`brown_training` run to its end: the same tuple with the list of the steps' facts."""
    model, vocabulary, steps, train_path, heldout_path = brown_training(directory, streams, **settings)
    return model, vocabulary, list(steps), train_path, heldout_path


def forward_parts(model: ElmoBiLmModel) -> Dict[str, Tuple[torch.nn.Module, str]]:
    """The forward pass's three parts, by name: the module and the name of the method that
    runs each (what the profile labels and `step_regions.py` times)."""
    return {"char CNN + highway + projection": (model._bilm._token_embedder, "embed_tokens"),
            "LSTM stack": (model._bilm.lstm, "forward_with_state"),
            "sampled softmax": (model._softmax_loss, "forward")}


def labelled_forward_parts(model: ElmoBiLmModel) -> None:
    """Profiler labels around the forward of the token layer, the LSTM stack and the sampled
    softmax (their backward shows under `step: backward`, by operator)."""
    record = torch.autograd.profiler.record_function
    for name, (module, method_name) in forward_parts(model).items():
        label = f"forward: {name}"
        method = getattr(module, method_name)

        def labelled(*args, label=label, method=method, **kwargs):
            with record(label):
                return method(*args, **kwargs)

        setattr(module, method_name, labelled)


# CUDA runtime calls that make the host wait for the GPU (a copy to the host, an explicit
# synchronisation): each one empties the queue of launched kernels.
HOST_WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync", "cudaMemcpy")


def run_profile(args) -> None:
    """One profile of whole training steps: the phases, the forward parts, the top operators;
    on a GPU also the share of the wall time it spends in kernels, and the host's waits."""
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    on_gpu = args.device != "cpu"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with tempfile.TemporaryDirectory() as directory:
        model, _, steps, _, _ = brown_training(directory, args.streams, **model_settings(args),
                                               max_steps=args.steps)
        labelled_forward_parts(model)
        for _ in range(args.warmup):  # one-off allocations
            next(steps)
        with torch.profiler.profile(activities=activities) as profile:
            measured = list(steps)
    total = sum(step["seconds"] for step in measured)
    print(f"profile of {len(measured)} training steps, {args.streams} streams, {args.threads} threads, "
          f"{args.architecture} architecture on {args.device}: {total / len(measured) * 1e3:.1f} ms/step "
          f"(with the profiler's overhead)")
    averages = profile.key_averages()
    labels = (e for e in averages if e.key.startswith(("step:", "forward:")) and e.cpu_time_total > 0)
    for event in sorted(labels, key=lambda e: e.key):
        print(f"  {event.key}: {event.cpu_time_total / 1e3 / len(measured):.1f} ms/step on the host "
              f"({event.cpu_time_total / 1e6 / total:.0%})")
    if on_gpu:
        events = profile.events()
        # The labels' GPU-side spans are annotations, not kernels.
        kernels = [event for event in events
                   if event.device_type == DeviceType.CUDA and not event.name.startswith(("step:", "forward:"))]
        busy = sum(event.time_range.elapsed_us() for event in kernels) / 1e6
        print(f"  GPU in kernels {busy / len(measured) * 1e3:.1f} ms/step = {busy / total:.0%} of the wall time; "
              f"{len(kernels) / len(measured):.0f} kernels per step")
        for name in HOST_WAITS:
            calls = sum(1 for event in events if event.name == name)
            if calls:
                print(f"  {name}: {calls / len(measured):.1f} per step")
        print(averages.table(sort_by="self_cuda_time_total", row_limit=args.rows))
    print(averages.table(sort_by="self_cpu_time_total", row_limit=args.rows))


def run_speed(args) -> None:
    if args.profile:
        run_profile(args)
        return
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with tempfile.TemporaryDirectory() as directory:
        model, vocabulary, steps, _, _ = train_on_brown(
            directory, args.streams, **model_settings(args), max_steps=args.steps
        )
    # The first steps include one-off allocations: the process's heap grows to its working
    # size (page faults) before the steps settle.
    measured = steps[args.warmup:]
    seconds = sum(s["seconds"] for s in measured)
    positions = sum(s["positions"] for s in measured)
    flops = sum(forward_flops(model.bilm.options, s["distinct_tokens"], s["positions"])
                for s in measured)
    if args.device != "cpu":
        print(f"training throughput: {positions / seconds:.0f} tokens/s")
        print(f"on {torch.cuda.get_device_name(args.device)}: {len(measured)} steps after {args.warmup}, "
              f"{seconds / len(measured) * 1e3:.1f} ms/step, {args.streams} streams x {WINDOW_SIZE}, "
              f"{args.architecture} architecture, training precision {args.precision}, optimizer {args.optimizer}, "
              f"LSTM steps as CUDA graphs {not args.without_cuda_graphs}, "
              f"peak GPU memory {torch.cuda.max_memory_allocated(args.device) / 2**20:.0f} MB")
        return
    rates = gemm_rate()
    best_rate = max(rates.values())
    print(f"training precision {args.precision}, optimizer {args.optimizer}; {args.architecture} architecture "
          f"({architecture_name(model.bilm.options)}), vocabulary {vocabulary.get_vocab_size('lm_tokens')} "
          f"words, {args.streams} streams x {WINDOW_SIZE} steps, {args.threads} threads")
    print(f"steps measured: {len(measured)} after {args.warmup}, {seconds / len(measured):.2f} s/step, "
          f"distinct tokens per step {numpy.mean([s['distinct_tokens'] for s in measured]):.0f} "
          f"of {2 * args.streams * WINDOW_SIZE}")
    print(f"training throughput: {positions / seconds:.0f} tokens/s")
    print(f"page faults per step: {numpy.mean([s['page_faults'] for s in measured]):.0f} "
          f"({allocation.ENVIRONMENT_VARIABLE}={allocation.mode()}); peak RSS of the process "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    before, after = steps[0]["peak_rss_mb_before"], steps[-1]["peak_rss_mb_after"]
    print(f"peak RSS before the first step {before:.0f} MB (model, optimizer, data), after the last "
          f"{after:.0f} MB: the steps' peak memory above that {after - before:.0f} MB")
    for label, rate in rates.items():
        print(f"GEMM rate {label}: {rate:.1f} GFLOP/s")
    achieved = 3 * flops / seconds / 1e9
    print(f"3x forward FLOPs per second: {achieved:.1f} GFLOP/s = {achieved / best_rate:.0%} of the "
          f"best measured GEMM rate ({best_rate:.1f} GFLOP/s)")
    print(f"compute limit at that rate: {positions / seconds * best_rate / achieved:.0f} tokens/s")


def run_memory(args) -> None:
    torch.set_num_threads(args.threads)
    print(f"{args.architecture} architecture, {args.streams} streams x {WINDOW_SIZE} steps, {args.threads} threads, "
          f"{allocation.ENVIRONMENT_VARIABLE}={allocation.mode()}, {args.precision}")
    with tempfile.TemporaryDirectory() as directory:
        _, _, steps, _, _ = brown_training(directory, args.streams, **model_settings(args),
                                           max_steps=args.steps)
        interval: List[Dict[str, float]] = []
        number = 0

        def report() -> None:
            seconds = sum(s["seconds"] for s in interval)
            print(f"steps {number - len(interval) + 1:4d}-{number:4d}: "
                  f"{sum(s['positions'] for s in interval) / seconds:5.0f} tokens/s, "
                  f"{numpy.mean([s['page_faults'] for s in interval]):7.0f} page faults/step, "
                  f"peak RSS {interval[-1]['peak_rss_mb_after']:.0f} MB", flush=True)
            interval.clear()

        for number, step in enumerate(steps, start=1):
            if number == 1:
                print(f"peak RSS before the first step (model, optimizer, data): {step['peak_rss_mb_before']:.0f} MB")
            interval.append(step)
            if number % args.report_every == 0:
                report()
        if interval:  # the last steps, also where the corpus ran out before --steps
            report()
        if number < args.steps:
            print(f"the corpus (one epoch) ended after {number} of {args.steps} steps")


def stream_perplexity(model, vocabulary, path: str, streams: int = 64) -> Dict[str, float]:
    """
    Full-softmax perplexity of the text cut into `streams` streams, each read with carried
    state (bilm-tf reads one stream, which is the same except at the streams' starts, and
    ~30x slower on CPU).
    """
    reader = BiLmCorpusReader(window_size=WINDOW_SIZE, num_streams=streams)
    loader = SimpleDataLoader(list(reader.read(path)), batch_size=streams)
    loader.index_with(vocabulary)
    metrics = evaluate(model, loader)
    return {key: metrics[key] for key in ("forward_perplexity", "backward_perplexity", "perplexity")}


def oov_rate(vocabulary, path: str) -> float:
    words = vocabulary.get_token_to_index_vocabulary("lm_tokens")
    tokens = [t for line in open(path, encoding="utf-8") for t in line.split()]
    return sum(t not in words for t in tokens) / len(tokens)


def run_perplexity(args) -> None:
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as directory:
        model, vocabulary, steps, _, heldout_path = train_on_brown(
            directory, args.streams, seed=args.seed, **model_settings(args), max_steps=args.steps
        )
        model.eval()
        result = stream_perplexity(model, vocabulary, heldout_path)
    print(f"{args.architecture} architecture, {args.precision}, {args.optimizer}, seed {args.seed}, "
          f"{len(steps)} steps of {args.streams} streams: last 20 steps mean loss "
          f"{numpy.mean([s['loss'] for s in steps[-20:]]):.4f}; Brown held-out perplexity "
          f"{result['perplexity']:.2f} (forward {result['forward_perplexity']:.2f}, "
          f"backward {result['backward_perplexity']:.2f})")


def run_brown(args) -> None:
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as directory:
        model, vocabulary, steps, train_path, heldout_path = train_on_brown(
            directory, args.streams, **model_settings(args), max_seconds=args.minutes * 60
        )
        trained_positions = sum(s["positions"] for s in steps)
        train_tokens = sum(len(line.split()) + 2 for line in open(train_path, encoding="utf-8"))
        print(f"trained {args.minutes} min: {len(steps)} steps, {trained_positions} tokens "
              f"({trained_positions / train_tokens:.2f} epochs of Brown, {train_tokens} tokens), "
              f"last 20 steps mean loss {numpy.mean([s['loss'] for s in steps[-20:]]):.3f}")
        model.eval()
        os.makedirs(OUTPUT, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(OUTPUT, "brown_bilm.th"))
        print_test_perplexities(model, vocabulary, heldout_path)


def print_test_perplexities(model, vocabulary, heldout_path: str, heldout_sentences: int = 500) -> None:
    """Full-softmax perplexity and OOV rate on held-out Brown, WikiText-2 test and PTB test."""
    evaluations = {f"brown held-out ({heldout_sentences} sentences)": heldout_path}
    for name in ("wikitext2.test.txt", "ptb.test.txt"):
        evaluations[name] = os.path.join(SHARED_DATA, "lm_eval", name)
    for label, path in evaluations.items():
        start = time.perf_counter()
        result = stream_perplexity(model, vocabulary, path)
        print(f"{label}: perplexity {result['perplexity']:.1f} (forward "
              f"{result['forward_perplexity']:.1f}, backward {result['backward_perplexity']:.1f}), "
              f"OOV rate {oov_rate(vocabulary, path):.1%}, {time.perf_counter() - start:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["speed", "perplexity", "brown", "memory"])
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=5, help="speed: steps run before the measured ones")
    parser.add_argument("--report-every", type=int, default=50, help="memory: steps per line")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0, help="perplexity: the model's and the data order's seed")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--profile", action="store_true", help="speed: a profile of the steps instead")
    parser.add_argument("--rows", type=int, default=18, help="profile: operators per table")
    parser.add_argument("--without-cuda-graphs", action="store_true",
                        help="speed on a GPU: the LSTM's training steps launched from Python (ElmoLstm.cuda_graphs off)")
    parser.add_argument("--precision", default="float32", choices=TRAINING_PRECISIONS,
                        help="the model's training_precision (bfloat16: the products of training in bfloat16)")
    parser.add_argument("--device", default="cpu", help="speed: cpu, or cuda[:N] (float32 with TF32 off)")
    parser.add_argument("--architecture", default="small", choices=sorted(ARCHITECTURE_OPTIONS),
                        help="the published architecture trained (weights random)")
    parser.add_argument("--optimizer", default="fused_adagrad", choices=["fused_adagrad", "adagrad"],
                        help="the registered optimizer (the configs' default: fused_adagrad)")
    args = parser.parse_args()
    {"speed": run_speed, "perplexity": run_perplexity, "brown": run_brown, "memory": run_memory}[args.part](args)


if __name__ == "__main__":
    main()
