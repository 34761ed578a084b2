import random

import pytest
import torch
from allennlp.common.testing import AllenNlpTestCase
from allennlp.common.tqdm import Tqdm

from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader
from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary
from elmo_plugin.data.bilm_window_loader import BiLmWindowLoader

SENTENCES = [f"sentence {i} has {'some ' * (i % 7)}words ." for i in range(40)]


class TestBiLmWindowLoader(AllenNlpTestCase):
    def loader(self, shuffle=False, **settings):
        path = self.TEST_DIR / "corpus.txt"
        path.write_text("".join(f"{line}\n" for line in SENTENCES), encoding="utf-8")
        reader = BiLmCorpusReader(window_size=5, num_streams=3, shuffle=shuffle)
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

    def test_read_lazily_its_length_is_the_batches_of_the_next_pass(self):
        # Shuffled passes pack differently: each length must be that pass's own, asked before
        # the pass as AllenNLP's trainer asks (`iter` first, then `len`, then the batches).
        random.seed(0)  # the reader draws its shuffling seed: these passes differ in length
        lazy = self.loader(shuffle=True, max_instances_in_memory=4)
        lengths = []
        for _ in range(6):
            batches = iter(lazy)
            expected = len(lazy)
            assert len(lazy) == expected  # asked again in the same pass: the same count
            lengths.append(expected)
            assert len(list(batches)) == expected
        assert len(set(lengths)) > 1, "the passes should pack into different numbers of batches"
        assert len(self.loader(max_instances_in_memory=4)) == len(self.loader())

    def test_read_in_a_worker_process_every_pass_is_shuffled_as_in_this_one(self):
        # The worker reads each pass with a copy of the reader; before, every pass was the first.
        passes = {}
        for workers in (0, 1):
            random.seed(0)
            loader = self.loader(shuffle=True, max_instances_in_memory=6, num_workers=workers)
            passes[workers] = []
            for _ in range(3):
                batches = iter(loader)
                expected = len(loader)
                ids = [batch["forward_tokens"]["lm"]["tokens"].tolist() for batch in batches]
                assert len(ids) == expected
                passes[workers].append(ids)
        assert passes[1] == passes[0]
        assert passes[0][0] != passes[0][1] != passes[0][2]
