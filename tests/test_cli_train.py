"""One real `allennlp train` run through the command line (the CLI takes ~8 s to start)."""
import json
import os
import re
import subprocess
import sys

from allennlp.common.testing import AllenNlpTestCase
from allennlp.models.archival import load_archive

from elmo_plugin import ElmoTokenEmbedder
from tests.helpers import ELMO_FIXTURES, REPO_ROOT, TEST_FIXTURES


class TestTrainCommand(AllenNlpTestCase):
    def test_tagger_with_elmo_trains_through_the_cli(self):
        serialization_dir = self.TEST_DIR / "tagger"
        environment = dict(
            os.environ,
            ELMO_FIXTURE_DIR=str(ELMO_FIXTURES),
            TAGGING_DATA=str(TEST_FIXTURES / "tagging" / "sentences.txt"),
        )
        completed = subprocess.run(
            [sys.executable, "-m", "allennlp", "train", str(TEST_FIXTURES / "tagger_elmo.jsonnet"),
             "-s", str(serialization_dir), "--include-package", "elmo_plugin"],
            cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=600,
        )
        output = completed.stdout + completed.stderr
        assert completed.returncode == 0, output[-5000:]
        # The install is quiet: no Python warning reaches the user of a plain training run.
        assert not re.search(r"\w+Warning:", output), output[-5000:]
        metrics = json.loads((serialization_dir / "metrics.json").read_text())
        assert 0.0 <= metrics["training_accuracy"] <= 1.0
        assert "validation_accuracy" in metrics
        archive = load_archive(str(serialization_dir / "model.tar.gz"))
        embedder = archive.model.text_field_embedder._token_embedders["elmo"]
        assert type(embedder) is ElmoTokenEmbedder
