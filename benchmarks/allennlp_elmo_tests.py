"""
Runs AllenNLP's own ELMo tests against this package's classes, as a new user would: the test
files of a local AllenNLP git checkout (any clone with the tags), with their imports pointed at
ours, AllenNLP's test fixtures from the same checkout. Prints each test's outcome and a count.

    git clone https://github.com/allenai/allennlp /tmp/allennlp
    python benchmarks/allennlp_elmo_tests.py /tmp/allennlp

Nothing of AllenNLP's is kept: the files are read with `git show`, rewritten into a temporary
directory and run there. The project's own suite has a test of ours for each behaviour these
check; this script keeps the drop-in claim honest against the originals.
"""
import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# (tag, path in the checkout, name of the copy).
TEST_FILES = [
    ("v2.10.1", "tests/modules/elmo_test.py", "test_elmo_2_10.py"),
    ("v2.10.1", "tests/modules/stacked_elmo_lstm_test.py", "test_stacked_elmo_lstm_2_10.py"),
    ("v2.10.1", "tests/modules/elmo_token_embedders/elmo_token_embedder_test.py", "test_elmo_token_embedder_2_10.py"),
    ("v2.10.1", "tests/data/token_indexers/elmo_indexer_test.py", "test_elmo_indexer_2_10.py"),
    ("v0.9.0", "allennlp/tests/commands/elmo_test.py", "test_commands_elmo_0_9.py"),
]
FIXTURES = ("test_fixtures/elmo", "test_fixtures/data/conll2003.txt")

# Tests that assert a known bug of the original, with the reason.
EXCLUDED = {
    "test_embed_batch_is_empty_sentence": "0.9 hard-codes 1024 as the width of an empty "
    "sentence's embedding whatever the model; ours gives the model's width (32 here)",
}

# AllenNLP names -> ours, as a user would point the imports.
IMPORTS = {
    "Elmo": "from elmo_plugin import Elmo",
    "_ElmoBiLm": "from elmo_plugin import ElmoBiLm as _ElmoBiLm",
    "_ElmoCharacterEncoder": "from elmo_plugin.modules.char_encoder import ElmoCharacterEncoder as _ElmoCharacterEncoder",
    "batch_to_ids": "from elmo_plugin import batch_to_ids",
    "ElmoLstm": "from elmo_plugin.modules.elmo_lstm import ElmoLstm",
    "ElmoTokenEmbedder": "from elmo_plugin import ElmoTokenEmbedder",
    "ELMoTokenCharactersIndexer": "from elmo_plugin import ElmoTokenCharactersIndexer as ELMoTokenCharactersIndexer",
}
ELMO_MODULES = r"allennlp\.(modules\.elmo|modules\.elmo_lstm|modules\.token_embedders|data\.token_indexers(\.elmo_indexer)?)"


def point_imports_at_ours(source: str) -> str:
    def replace(match: "re.Match") -> str:
        names = [name.strip() for name in match.group("names").replace("(", "").replace(")", "").split(",")]
        ours = [IMPORTS[name] for name in names if name in IMPORTS]
        theirs = [name for name in names if name and name not in IMPORTS]
        lines = ours + ([f"from {match.group('module')} import {', '.join(theirs)}"] if theirs else [])
        return "\n".join(lines)

    return re.sub(rf"^from (?P<module>{ELMO_MODULES}) import (?P<names>[^\n]+)$", replace, source, flags=re.MULTILINE)


def adapt_0_9(source: str) -> str:
    """0.9's test case is unittest-style and subclasses 0.9's `ElmoTestCase`: use 2.10's."""
    source = source.replace(
        "from allennlp.tests.modules.elmo_test import ElmoTestCase",
        "from test_elmo_2_10 import ElmoTestCase",
    )
    source = re.sub(r"def setUp\(self\):", "def setup_method(self):", source)
    return re.sub(r"super\(\w+, self\)\.setUp\(\)", "super().setup_method()", source)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("allennlp_checkout", type=Path, help="a git clone of allenai/allennlp with its tags")
    parser.add_argument("--verbose", action="store_true", help="also print pytest's output")
    args = parser.parse_args()

    def git(*arguments: str) -> bytes:
        return subprocess.run(["git", "-C", str(args.allennlp_checkout), *arguments], check=True,
                              capture_output=True).stdout

    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        archive = git("archive", "v2.10.1", *FIXTURES)
        subprocess.run(["tar", "-x", "-C", str(work_dir)], input=archive, check=True)
        for tag, path, name in TEST_FILES:
            source = point_imports_at_ours(git("show", f"{tag}:{path}").decode())
            if tag.startswith("v0.9"):
                source = adapt_0_9(source)
            (work_dir / name).write_text(source)
        (work_dir / "conftest.py").write_text(
            "import pathlib\n"
            "import elmo_plugin  # noqa: F401  (the `elmo` subcommand for 0.9's main())\n"
            "from allennlp.common.testing import AllenNlpTestCase\n"
            f"AllenNlpTestCase.FIXTURES_ROOT = pathlib.Path({str(work_dir / 'test_fixtures')!r})\n"
        )
        deselect = [f"--deselect={name}::{cls}::{test}" for name, cls, test in _excluded(work_dir)]
        completed = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "--rootdir", str(work_dir),
             *deselect, *[name for _, _, name in TEST_FILES]],
            cwd=work_dir, capture_output=True, text=True,
        )
    outcomes = [line for line in completed.stdout.splitlines() if line.startswith(("PASSED", "FAILED", "ERROR"))]
    for line in outcomes:
        print(line)
    for test, reason in EXCLUDED.items():
        print(f"EXCLUDED {test}: {reason}")
    print(completed.stdout.strip().splitlines()[-1])
    if "--verbose" in sys.argv or completed.returncode not in (0, 1):
        print(completed.stdout, completed.stderr[-3000:])


def _excluded(work_dir: Path):
    for _, _, name in TEST_FILES:
        current_class = None
        for line in (work_dir / name).read_text().splitlines():
            class_match = re.match(r"class (\w+)", line)
            if class_match:
                current_class = class_match.group(1)
            test_match = re.match(r"\s+def (test_\w+)", line)
            if test_match and test_match.group(1) in EXCLUDED:
                yield name, current_class, test_match.group(1)


if __name__ == "__main__":
    main()
