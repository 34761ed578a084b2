import pytest
from allennlp.common.checks import ConfigurationError
from allennlp.common.testing import AllenNlpTestCase

from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader

SENTENCES = [
    "the bats hang upside down .",
    "bats are made of wood",
    "a much longer sentence that does not fit into one window of text at all , not even close",
    "short",
    "x y",
]


def texts(field):
    return [token.text for token in field.tokens]


def stream_text(sentences):
    return [token for sentence in sentences for token in ["<S>", *sentence.split(), "</S>"]]


class TestBiLmCorpusReader(AllenNlpTestCase):
    def write(self, name, lines):
        path = self.TEST_DIR / name
        path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        return str(path)

    def test_sentences_are_wrapped_and_blank_lines_skipped(self):
        path = self.write("corpus.txt", [SENTENCES[0], "", "   ", SENTENCES[1]])
        instances = list(BiLmCorpusReader().read(path))
        assert [texts(instance["tokens"]) for instance in instances] == [
            ["<S>", *SENTENCES[0].split(), "</S>"],
            ["<S>", *SENTENCES[1].split(), "</S>"],
        ]

    def test_a_glob_reads_every_shard_in_order(self):
        self.write("shard-2.txt", SENTENCES[2:])
        self.write("shard-1.txt", SENTENCES[:2])
        instances = list(BiLmCorpusReader().read(str(self.TEST_DIR / "shard-*.txt")))
        assert [texts(i["tokens"])[1:-1] for i in instances] == [s.split() for s in SENTENCES]

    def test_shuffle_keeps_every_sentence(self):
        path = self.write("corpus.txt", SENTENCES)
        instances = list(BiLmCorpusReader(shuffle=True).read(path))
        assert sorted(" ".join(texts(i["tokens"])[1:-1]) for i in instances) == sorted(SENTENCES)

    def test_sentences_longer_than_the_limit_are_skipped_and_counted(self, caplog):
        path = self.write("corpus.txt", SENTENCES)
        instances = list(BiLmCorpusReader(max_sentence_length=6).read(path))
        assert len(instances) == 4
        assert "skipped 1 sentences longer than max_sentence_length=6" in caplog.text

    def test_windows_cover_each_streams_text_exactly_once_in_both_directions(self):
        path = self.write("corpus.txt", SENTENCES)
        window_size, num_streams = 4, 2
        instances = list(
            BiLmCorpusReader(window_size=window_size, num_streams=num_streams).read(path)
        )
        assert len(instances) % num_streams == 0
        # Instance i of every step continues stream i.
        for index, instance in enumerate(instances):
            assert instance["metadata"].metadata == {
                "stream": index % num_streams,
                "step": index // num_streams,
            }
        streams_forward = [[] for _ in range(num_streams)]
        streams_backward = [[] for _ in range(num_streams)]
        for index, instance in enumerate(instances):
            forward = texts(instance["forward_tokens"])
            backward = texts(instance["backward_tokens"])
            assert len(forward) == len(backward) <= window_size + 1
            stream = index % num_streams
            # Consecutive windows overlap by one token: the last target is the next first input.
            start = 1 if streams_forward[stream] else 0
            if streams_forward[stream] and forward:
                assert forward[0] == streams_forward[stream][-1]
            streams_forward[stream].extend(forward[start:])
            # Backward windows are stored left to right; the backward LM reads them reversed.
            streams_backward[stream].extend(backward[::-1][start:])
        # Every token of the corpus is in exactly one stream, each stream is whole sentences,
        # and the backward LM reads each stream's text reversed (sentence by sentence).
        assert sorted(t for s in streams_forward for t in s) == sorted(stream_text(SENTENCES))
        for forward, backward in zip(streams_forward, streams_backward):
            assert forward[0] == "<S>" and forward[-1] == "</S>"
            assert " ".join(forward).count("<S>") == " ".join(forward).count("</S>")
            sentences = " ".join(forward).replace("</S> <S>", "</S>|<S>").split("|")
            reversed_sentences = [" ".join(s.split()[::-1]) for s in sentences]
            assert backward == " ".join(reversed_sentences).split()
        # The long sentence spans several windows of one stream.
        long_sentence = SENTENCES[2].split()
        assert any(
            " ".join(long_sentence) in " ".join(stream) for stream in streams_forward
        )

    def test_more_streams_than_sentences_gives_empty_windows_in_idle_streams(self):
        path = self.write("corpus.txt", SENTENCES[:1])
        instances = list(BiLmCorpusReader(window_size=20, num_streams=3).read(path))
        assert len(instances) == 3
        assert texts(instances[0]["forward_tokens"]) == stream_text(SENTENCES[:1])
        assert texts(instances[1]["forward_tokens"]) == []

    def test_errors_name_the_problem(self):
        empty = self.write("empty.txt", ["", "  "])
        with pytest.raises(ConfigurationError, match="empty.txt.*no sentences"):
            list(BiLmCorpusReader().read(empty))
        with pytest.raises(ConfigurationError, match="no file matches"):
            list(BiLmCorpusReader().read(str(self.TEST_DIR / "missing-*.txt")))
        with pytest.raises(ConfigurationError, match="missing.txt not found"):
            list(BiLmCorpusReader().read(str(self.TEST_DIR / "missing.txt")))
        bad = self.TEST_DIR / "bad.txt"
        bad.write_bytes(b"fine line\nbad \xff byte\n")
        with pytest.raises(ConfigurationError, match="bad.txt, line 2 is not valid UTF-8"):
            list(BiLmCorpusReader().read(str(bad)))
        with pytest.raises(ConfigurationError, match="go together"):
            BiLmCorpusReader(window_size=5)
        with pytest.raises(ConfigurationError, match="sentence instances only"):
            BiLmCorpusReader(window_size=5, num_streams=2, max_sentence_length=10)
