"""
Reruns the bad inputs of RELIABILITY.md that a command line shows, in this process (no 8 s
start-up per case), and prints what a user sees: the message AllenNLP's command line ends
with, or the exit status. Faults that need another process (kill -9, a full disk, a second
writer, recovery) are rerun by the tests RELIABILITY.md names.

    python benchmarks/reliability.py            # a Markdown table, one row per case
"""
import contextlib
import io
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, List, NamedTuple

import h5py

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from allennlp.commands import main  # noqa: E402

import elmo_plugin  # noqa: E402,F401
from elmo_plugin import ElmoEmbedder  # noqa: E402
from tests.random_weights import write_random_elmo  # noqa: E402
from tests.helpers import (  # noqa: E402
    BILM_CONFIGS, ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, SHARED_FIXTURES, bilm_data_overrides,
)
from tests.inference.test_embed_file import interrupt_after  # noqa: E402


class Case(NamedTuple):
    name: str
    # The command's arguments after `allennlp`; {dir} is a fresh working directory.
    argv: List[str]
    setup: Callable[[Path], None] = lambda directory: None


def train(**overrides) -> List[str]:
    """`allennlp train` of the tiny biLM config; the table shows `overrides` only (the fixture
    data paths and seeds are added)."""
    return TRAIN + ["-o", bilm_data_overrides(**overrides), "#" + json.dumps(overrides)]


def write(relative: str, content: bytes) -> Callable[[Path], None]:
    def setup(directory: Path) -> None:
        (directory / relative).write_bytes(content)
    return setup


def both(*setups: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(directory: Path) -> None:
        for each in setups:
            each(directory)
    return setup


def options_with(**changes) -> Callable[[Path], None]:
    def setup(directory: Path) -> None:
        options = json.loads(Path(ELMO_OPTIONS_FILE).read_text())
        for dotted, value in changes.items():
            section, key = dotted.split("__")
            options[section][key] = value
        (directory / "options.json").write_text(json.dumps(options))
    return setup


def truncated_weights(directory: Path) -> None:
    content = Path(ELMO_WEIGHT_FILE).read_bytes()
    (directory / "weights.hdf5").write_bytes(content[: len(content) // 2])


def interrupted_run(directory: Path) -> None:
    """`allennlp elmo --batch-size 1 --chunk-size 1` on in.txt, interrupted (Ctrl-C) after its
    first chunk."""
    embedder = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=True)  # the command's default
    interrupt_after(embedder, 1)
    try:
        embedder.embed_file(str(directory / "in.txt"), str(directory / "out.hdf5"), batch_size=1, chunk_size=1)
    except KeyboardInterrupt:
        return
    raise AssertionError("the run was not interrupted")


def empty_first_chunk(directory: Path) -> None:
    """A finished chunk that lost its content (a power loss before our fsync existed)."""
    chunks = sorted((directory / "out.hdf5.partial").glob("chunk_*.hdf5"))
    chunks[0].write_bytes(b"")


def other_model(directory: Path) -> None:
    write_random_elmo(directory, json.loads(Path(ELMO_OPTIONS_FILE).read_text()), seed=3)


def nan_in_weights(directory: Path) -> None:
    shutil.copy(ELMO_WEIGHT_FILE, directory / "weights.hdf5")
    with h5py.File(directory / "weights.hdf5", "r+") as handle:
        handle["RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0"][3, 5] = float("nan")


def copies_of_the_model(directory: Path) -> None:
    shutil.copy(ELMO_OPTIONS_FILE, directory / "options.json")
    shutil.copy(ELMO_WEIGHT_FILE, directory / "weights.hdf5")


def main_argv(argv: List[str]) -> None:
    sys.argv = ["allennlp", *argv]
    main(prog="allennlp")


FIXTURE = ["--options-file", ELMO_OPTIONS_FILE, "--weight-file", ELMO_WEIGHT_FILE]
GOOD = write("in.txt", b"The cat sat .\nA dog\nand a bird\n")
EMBED = ["elmo", "{dir}/in.txt", "{dir}/out.hdf5", "--all"]
TRAIN = ["train", str(BILM_CONFIGS / "tiny.jsonnet"), "-s", "{dir}/run"]

CASES = [
    Case("input with a blank line", EMBED + FIXTURE, write("in.txt", b"one\n\nthree\n")),
    Case("input that is not UTF-8", EMBED + FIXTURE, write("in.txt", b"ok\nbad \xff byte\n")),
    Case("empty input", EMBED + FIXTURE, write("in.txt", b"")),
    Case("missing input", EMBED + FIXTURE),
    Case("output is a directory", ["elmo", "{dir}/in.txt", "{dir}", "--all", *FIXTURE], GOOD),
    Case("output is the input", ["elmo", "{dir}/in.txt", "{dir}/in.txt", "--all", "--overwrite", *FIXTURE], GOOD),
    Case("output exists", EMBED + FIXTURE, both(GOOD, write("out.hdf5", b"x"))),
    Case("--chunk-size 0", EMBED + FIXTURE + ["--chunk-size", "0"], GOOD),
    Case("--chunk-size -5", EMBED + FIXTURE + ["--chunk-size", "-5"], GOOD),
    Case("--batch-size 0", EMBED + FIXTURE + ["--batch-size", "0"], GOOD),
    Case("--use-sentence-keys with '/' in a line", EMBED + FIXTURE + ["--use-sentence-keys"], write("in.txt", b"a/b c\n")),
    Case("weights that are not HDF5", EMBED + ["--options-file", ELMO_OPTIONS_FILE, "--weight-file", "{dir}/in.txt"], GOOD),
    Case("truncated weights", EMBED + ["--options-file", ELMO_OPTIONS_FILE, "--weight-file", "{dir}/weights.hdf5"],
         both(GOOD, truncated_weights)),
    Case("options with fewer highway layers than the weights", EMBED + ["--options-file", "{dir}/options.json", "--weight-file", ELMO_WEIGHT_FILE],
         both(GOOD, options_with(char_cnn__n_highway=1))),
    Case("options with fewer LSTM layers than the weights", EMBED + ["--options-file", "{dir}/options.json", "--weight-file", ELMO_WEIGHT_FILE],
         both(GOOD, options_with(lstm__n_layers=1))),
    Case("options with another projection size", EMBED + ["--options-file", "{dir}/options.json", "--weight-file", ELMO_WEIGHT_FILE],
         both(GOOD, options_with(lstm__projection_dim=17))),
    Case("unreachable http URL", EMBED + ["--options-file", ELMO_OPTIONS_FILE, "--weight-file", "http://127.0.0.1:9/w.hdf5"], GOOD),
    Case("s3 URL without access", EMBED + ["--options-file", ELMO_OPTIONS_FILE, "--weight-file", "s3://no-such-bucket-elmo/w.hdf5"], GOOD),
    Case("--cuda-device 0 without that GPU", EMBED + FIXTURE + ["--cuda-device", "0"], GOOD),
    Case("--resume with another chunk size", EMBED + FIXTURE + ["--resume", "--batch-size", "1", "--chunk-size", "2"],
         both(GOOD, interrupted_run)),
    Case("--resume with another precision", EMBED + FIXTURE + ["--resume", "--batch-size", "1", "--chunk-size", "1", "--precision", "bfloat16"],
         both(GOOD, interrupted_run)),
    Case("--resume with another model", EMBED + ["--options-file", "{dir}/options.json", "--weight-file", "{dir}/weights.hdf5",
         "--resume", "--batch-size", "1", "--chunk-size", "1"], both(GOOD, interrupted_run, other_model)),
    Case("--resume with a finished chunk emptied", EMBED + FIXTURE + ["--resume", "--batch-size", "1", "--chunk-size", "1"],
         both(GOOD, interrupted_run, empty_first_chunk)),
    Case("options without weights", EMBED + ["--options-file", ELMO_OPTIONS_FILE], GOOD),
    Case("a NaN clip in the options", EMBED + ["--options-file", "{dir}/options.json", "--weight-file", ELMO_WEIGHT_FILE],
         both(GOOD, options_with(lstm__cell_clip=float("nan")))),
    Case("a NaN in the weights", EMBED + ["--options-file", ELMO_OPTIONS_FILE, "--weight-file", "{dir}/weights.hdf5"],
         both(GOOD, nan_in_weights)),
    Case("output over the weights, --overwrite", ["elmo", "{dir}/in.txt", "{dir}/weights.hdf5", "--all", "--overwrite",
         "--options-file", "{dir}/options.json", "--weight-file", "{dir}/weights.hdf5"], both(GOOD, copies_of_the_model)),
    Case("token vectors over the word list", ["elmo-token-vectors", "{dir}/in.txt", "{dir}/in", "--overwrite", *FIXTURE], GOOD),
    Case("input is a directory", ["elmo", "{dir}", "{dir}/out.hdf5", "--all", *FIXTURE]),
    Case("input is '-' (standard input)", ["elmo", "-", "{dir}/out.hdf5", "--all", *FIXTURE]),
    Case("input starting with a UTF-8 byte-order mark", EMBED + FIXTURE, write("in.txt", b"\xef\xbb\xbfThe cat sat .\n")),
    Case("training streams that disagree with the validation reader's",
         train(**{"dataset_reader.num_streams": 2, "data_loader.batch_size": 2})),
    Case("AllenNLP's loader with a batch size that fits only the training reader",
         train(**{"dataset_reader.num_streams": 2, "data_loader": {"type": "multiprocess", "batch_size": 2}})),
    Case("a shuffling window loader", train(**{"data_loader.shuffle": True})),
    Case("a missing validation file, read lazily",
         train(**{"validation_data_path": "{dir}/heldout.txt", "data_loader.max_instances_in_memory": 8})),
]


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("elmo_plugin"):
            self.messages.append(record.getMessage())


def run(case: Case) -> str:
    directory = Path(tempfile.mkdtemp(prefix="reliability_"))
    warnings = _Warnings()
    try:
        case.setup(directory)
        argv = [a.replace("{dir}", str(directory)) for a in case.argv if not a.startswith("#")]
        logging.getLogger().addHandler(warnings)
        handlers = list(logging.getLogger().handlers)
        try:
            # What the command prints besides its end (`allennlp train` logs to stdout) stays
            # out of the table.
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                main_argv(argv)
            seen = "exit 0" + (" (output written)" if _has_output(directory) else "")
        except SystemExit as exit:  # our commands' one-line errors, or an exit status
            seen = exit.code if isinstance(exit.code, str) else f"exit {exit.code}"
        except BaseException as error:  # what the command line prints last
            seen = f"{type(error).__name__}: {error}"
        finally:
            logging.getLogger().handlers = handlers  # `allennlp train` adds its own
        seen += "".join(f"; warning: {message}" for message in warnings.messages)
        return _shown(seen.replace(str(directory), "DIR"))
    finally:
        logging.getLogger().removeHandler(warnings)
        shutil.rmtree(directory, ignore_errors=True)


def _has_output(directory: Path) -> bool:
    path = directory / "out.hdf5"
    if not path.exists():
        return False
    with h5py.File(path, "r") as handle:
        return len(handle) > 0


def _shown(text: str) -> str:
    return text.replace(str(SHARED_FIXTURES), "../shared/fixtures").replace(str(REPO_ROOT) + "/", "")


def command_line(case: Case) -> str:
    arguments = []
    for argument in case.argv:
        if argument.startswith("{") and argument.endswith("}") and len(argument) > 6:
            continue  # the full overrides; the shown ones follow
        argument = argument[1:] if argument.startswith("#") else argument
        argument = _shown(argument).replace("{dir}", "DIR")
        arguments.append(argument if " " not in argument else f"'{argument}'")
    return "allennlp " + " ".join(arguments)


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger().handlers = []  # the table alone on stdout; errors are caught per case
    print("| Case | Command | What the user sees |")
    print("|---|---|---|")
    for case in CASES:
        seen = run(case).replace("|", "\\|").replace("\n", " ")
        print(f"| {case.name} | `{command_line(case)}` | {seen} |", flush=True)
