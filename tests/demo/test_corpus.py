from elmo_plugin.demo.corpus import SENSES, generate_sentences, sense_tag, tagged_line


def test_generation_is_reproducible_and_marks_each_ambiguous_word():
    first = list(generate_sentences(300, seed=5))
    assert first == list(generate_sentences(300, seed=5))
    assert first != list(generate_sentences(300, seed=6))
    with_word = [s for s in first if s.word is not None]
    fillers = [s for s in first if s.word is None]
    assert fillers and len(with_word) > len(fillers)
    for sentence in with_word:
        assert sentence.tokens[sentence.position] == sentence.word
        assert sentence.sense in SENSES[sentence.word]
        assert "\x00" not in sentence.text
    for sentence in fillers:
        assert not set(sentence.tokens) & set(SENSES)
    # Every word in both of its senses.
    assert {(s.word, s.sense) for s in with_word} == {
        (word, sense) for word, senses in SENSES.items() for sense in senses
    }


def test_senses_have_their_own_contexts():
    """The point of the corpus: a sense's context words do not occur with the other sense."""
    sentences = [s for s in generate_sentences(2000, seed=1) if s.word == "bats"]
    contexts = {
        sense: {t for s in sentences if s.sense == sense for t in s.tokens}
        for sense in SENSES["bats"]
    }
    assert "cave" in contexts["animal"] and "cave" not in contexts["sport"]
    assert "wood" in contexts["sport"] and "wood" not in contexts["animal"]


def test_tagged_lines_tag_only_the_ambiguous_word():
    sentence = next(s for s in generate_sentences(50, seed=2) if s.word is not None)
    tags = [pair.split("###")[1] for pair in tagged_line(sentence).split()]
    assert tags[sentence.position] == f"B-{sentence.word}.{sentence.sense}"
    assert sum(tag != "O" for tag in tags) == 1
    assert sense_tag(sentence, sentence.position) == tags[sentence.position]


def test_the_demo_writes_its_corpus_files(tmp_path):
    from elmo_plugin.demo.run import write_corpus

    corpus = write_corpus(str(tmp_path / "corpus"), train_sentences=100, seed=3)
    lines = {
        name: open(corpus[name], encoding="utf-8").read().splitlines()
        for name in ("train", "heldout", "senses", "tagging_train", "tagging_dev")
    }
    assert len(lines["train"]) == 100 and len(lines["heldout"]) == 50
    assert lines["senses"] == [s.text for s in corpus["sense_sentences"]]
    assert all(s.word is not None for s in corpus["sense_sentences"])
    assert all("###" in token for token in lines["tagging_train"][0].split())
