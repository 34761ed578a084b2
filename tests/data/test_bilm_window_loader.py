import pytest
import torch
from allennlp.common.testing import AllenNlpTestCase
from allennlp.common.tqdm import Tqdm

from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader
from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary
from elmo_plugin.data.bilm_window_loader import BiLmWindowLoader

SENTENCES = [f"sentence {i} has {'some ' * (i % 7)}words ." for i in range(40)]


class TestBiLmWindowLoader(AllenNlpTestCase):
    def loader(self, **settings):
        path = self.TEST_DIR / "corpus.txt"
        path.write_text("".join(f"{line}\n" for line in SENTENCES), encoding="utf-8")
        reader = BiLmCorpusReader(window_size=5, num_streams=3)
        vocabulary = BiLmVocabulary.from_bilm_corpus(instances=BiLmCorpusReader().read(str(path)))
        loader = BiLmWindowLoader(reader, str(path), **settings)
        loader.index_with(vocabulary)
        return loader

    def test_read_lazily_the_batches_are_those_read_at_once(self):
        eager = list(self.loader())
        lazy = list(self.loader(max_instances_in_memory=4))
        assert len(eager) == len(lazy) > 3
        for eager_batch, lazy_batch in zip(eager, lazy):
            for key in ("forward_tokens", "backward_tokens"):
                for name, tensor in eager_batch[key]["elmo"].items():
                    assert torch.equal(tensor, lazy_batch[key]["elmo"][name])

    @pytest.fixture(autouse=True)
    def _bars(self, monkeypatch):
        self.bars = []
        original = Tqdm.tqdm

        def recorded(*args, **kwargs):
            self.bars.append(kwargs.get("desc"))
            return original(*args, **kwargs)

        monkeypatch.setattr(Tqdm, "tqdm", recorded)

    def test_read_lazily_no_bar_of_its_own_between_the_trainers(self):
        lazy = self.loader(max_instances_in_memory=4)
        assert list(lazy) and "loading instances" not in self.bars
        assert not lazy.quiet
        list(lazy.iter_instances())  # e.g. for the vocabulary: a pass of its own, with its bar
        assert "loading instances" in self.bars
        self.bars.clear()
        list(self.loader())  # read at once: its bar shows how far the reading is
        assert "loading instances" in self.bars
