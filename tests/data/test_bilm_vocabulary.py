import pytest
from allennlp.common.checks import ConfigurationError
from allennlp.common.params import Params
from allennlp.common.testing import AllenNlpTestCase
from allennlp.data.vocabulary import Vocabulary

from elmo_plugin.data.bilm_corpus_reader import LM_NAMESPACE, BiLmCorpusReader
from elmo_plugin.data.bilm_vocabulary import BiLmVocabulary
from elmo_plugin.data.vocab_file import read_bilm_vocab_file, write_bilm_vocab_file
from tests.helpers import SHARED_FIXTURES

VOCAB_FILE = str(SHARED_FIXTURES / "bilm_train" / "vocab.txt")


class TestBiLmVocabulary(AllenNlpTestCase):
    def test_a_bilm_tf_vocab_file_gives_its_ids_and_unknown_words_map_to_unk(self):
        vocabulary = Vocabulary.from_params(Params({"type": "bilm", "vocab_file": VOCAB_FILE}))
        words = read_bilm_vocab_file(VOCAB_FILE)
        assert BiLmVocabulary.words(vocabulary) == words
        assert words[:3] == ["<S>", "</S>", "<UNK>"]
        assert vocabulary.get_token_index("of", LM_NAMESPACE) == words.index("of")
        assert vocabulary.get_token_index("never-seen", LM_NAMESPACE) == 2

    def test_built_from_data_special_tokens_first_then_by_count(self):
        path = self.TEST_DIR / "corpus.txt"
        path.write_text("b a b c\nb a\n", encoding="utf-8")
        for reader in (BiLmCorpusReader(), BiLmCorpusReader(window_size=3, num_streams=2)):
            instances = list(reader.read(str(path)))
            vocabulary = Vocabulary.from_params(Params({"type": "bilm"}), instances=instances)
            assert BiLmVocabulary.words(vocabulary) == ["<S>", "</S>", "<UNK>", "b", "a", "c"]
            with_min_count = Vocabulary.from_params(
                Params({"type": "bilm", "min_count": 2}), instances=instances
            )
            assert BiLmVocabulary.words(with_min_count) == ["<S>", "</S>", "<UNK>", "b", "a"]

    def test_saved_and_loaded_like_a_model_archive_keeps_unk_as_the_unknown_word(self):
        vocabulary = BiLmVocabulary.from_bilm_corpus(vocab_file=VOCAB_FILE)
        vocabulary.save_to_files(str(self.TEST_DIR / "vocabulary"))
        # Model archives load the vocabulary with the configured type's from_files(dir, None, None).
        loaded = BiLmVocabulary.from_files(str(self.TEST_DIR / "vocabulary"), None, None)
        assert BiLmVocabulary.words(loaded) == BiLmVocabulary.words(vocabulary)
        assert loaded.get_token_index("never-seen", LM_NAMESPACE) == 2

    def test_write_then_read_round_trips(self):
        path = str(self.TEST_DIR / "vocab.txt")
        write_bilm_vocab_file(path, ["<S>", "</S>", "<UNK>", "über", "x"])
        assert read_bilm_vocab_file(path) == ["<S>", "</S>", "<UNK>", "über", "x"]

    def test_bad_vocab_files_are_refused_with_the_line(self):
        def write(name, text):
            path = self.TEST_DIR / name
            path.write_text(text, encoding="utf-8")
            return str(path)

        with pytest.raises(ConfigurationError, match=r"blank.txt, line 3: blank line"):
            read_bilm_vocab_file(write("blank.txt", "<S>\n</S>\n\n<UNK>\n"))
        with pytest.raises(ConfigurationError, match=r"dup.txt, line 5: 'a' already appears on"):
            read_bilm_vocab_file(write("dup.txt", "<S>\n</S>\n<UNK>\na\na\n"))
        with pytest.raises(ConfigurationError, match=r"lacks <S>, <UNK>"):
            read_bilm_vocab_file(write("special.txt", "</S>\na\n"))
        with pytest.raises(ConfigurationError, match="vocab file .*missing.txt not found"):
            read_bilm_vocab_file(str(self.TEST_DIR / "missing.txt"))
        with pytest.raises(ConfigurationError, match="no room"):
            BiLmVocabulary.from_bilm_corpus(instances=[], max_vocab_size=3)
