"""
Property tests of the data layer: the character mapping on any Unicode string, and the biLM
corpus reader on any bytes (a clear error or the file's words, never a traceback).
"""
import tempfile

from allennlp.common.checks import ConfigurationError
from hypothesis import given, settings
from hypothesis import strategies as st

from elmo_plugin.data.bilm_corpus_reader import BiLmCorpusReader
from elmo_plugin.data.character_mapper import (
    BEGINNING_OF_WORD_CHARACTER,
    END_OF_WORD_CHARACTER,
    MAX_CHARACTERS_PER_TOKEN,
    PADDING_CHARACTER,
    ElmoCharacterMapper,
    batch_to_ids,
)
from elmo_plugin.data.special_tokens import BOS_TOKEN, EOS_TOKEN

# Every code point, lone surrogates included (Python strings can hold them).
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=80)
MAPPER = ElmoCharacterMapper()


@given(ANY_TEXT)
def test_a_token_becomes_its_utf8_bytes_between_word_markers(word):
    ids = MAPPER.convert_word_to_char_ids(word)
    assert len(ids) == MAX_CHARACTERS_PER_TOKEN
    assert all(1 <= i <= PADDING_CHARACTER + 1 for i in ids)
    if word in (BOS_TOKEN, EOS_TOKEN):
        return
    # Cut after 48 bytes (even inside a character), the end marker always kept; lone
    # surrogates have no UTF-8 and are dropped.
    kept = word.encode("utf-8", "ignore")[: MAX_CHARACTERS_PER_TOKEN - 2]
    expected = [BEGINNING_OF_WORD_CHARACTER, *kept, END_OF_WORD_CHARACTER]
    expected += [PADDING_CHARACTER] * (MAX_CHARACTERS_PER_TOKEN - len(expected))
    assert ids == [i + 1 for i in expected]


@given(st.lists(st.lists(ANY_TEXT, max_size=6), max_size=5))
def test_batch_to_ids_pads_with_zeros(batch):
    ids = batch_to_ids(batch)
    longest = max((len(sentence) for sentence in batch), default=0)
    assert tuple(ids.shape) == (len(batch), longest, MAX_CHARACTERS_PER_TOKEN)
    for row, sentence in enumerate(batch):
        for position in range(longest):
            if position < len(sentence):
                assert ids[row, position].tolist() == MAPPER.convert_word_to_char_ids(sentence[position])
            else:
                assert not ids[row, position].any()


# Bytes that are mostly text: words, whitespace of every kind, line ends, and raw bytes.
TEXT_LIKE_BYTES = st.lists(
    st.one_of(
        st.sampled_from([b"the", b"cat", b"\xc3\xa9t\xc3\xa9", b"<S>", b"</S>", b"<UNK>"]),
        st.sampled_from([b" ", b"\t", b"\n", b"\r\n", b"\r", b"\x0b", b"\x0c", b"\xc2\x85", b"\xe2\x80\xa8"]),
        st.binary(max_size=3),
    ),
    max_size=40,
).map(b"".join)


@settings(max_examples=150)
@given(TEXT_LIKE_BYTES, st.booleans())
def test_the_corpus_reader_on_any_bytes(content, windows):
    with tempfile.NamedTemporaryFile(suffix=".txt") as handle:
        handle.write(content)
        handle.flush()
        reader = BiLmCorpusReader(window_size=4, num_streams=2) if windows else BiLmCorpusReader()
        try:
            instances = list(reader.read(handle.name))
        except ConfigurationError as error:
            assert handle.name in str(error)
            assert "not valid UTF-8" in str(error) or "no sentences" in str(error), str(error)
            return
    words = content.decode("utf-8").split()
    if windows:
        for instance in instances:
            assert 0 <= instance["metadata"].metadata["stream"] < 2
        read = [t.text for i in instances for t in i["forward_tokens"].tokens]
        assert set(read) <= set(words) | {BOS_TOKEN, EOS_TOKEN}
    else:
        read = [t.text for i in instances for t in i["tokens"].tokens[1:-1]]
        assert read == words
