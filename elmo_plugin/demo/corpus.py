"""
A generated English-like corpus in which ambiguous words occur in clearly different contexts,
one context family per sense ("bats hang upside down" / "bats are made of wood").

Everything is produced from the templates below and a seed, so the project ships no
third-party text. Each generated sentence records which ambiguous word it contains (if any),
the word's position and its sense, for the sense report and the sense-tagging task.
"""
import random
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

# For each ambiguous word, two senses; for each sense, sentence templates in which `{w}` is
# the ambiguous word and `{name}` slots draw from the sense's word lists below.
SENSES: Dict[str, Dict[str, Dict[str, object]]] = {
    "bats": {
        "animal": {
            "templates": [
                "the {w} hang upside down in the {place} .",
                "at night the {w} fly out of the {place} to eat {food} .",
                "{w} sleep in the {place} during the day .",
                "the {adj} {w} spread their wings and fly over the {place} .",
                "many {w} live in the {place} and hunt {food} .",
            ],
            "place": ["cave", "barn", "attic", "forest", "tunnel", "old tower"],
            "food": ["insects", "moths", "fruit", "mosquitoes", "beetles"],
            "adj": ["little", "brown", "hungry", "sleepy", "wild"],
        },
        "sport": {
            "templates": [
                "the players swing their {w} at the {thing} .",
                "{w} are made of {material} and last a whole season .",
                "the coach bought new {w} for the {team} .",
                "he cracked one of the {adj} {w} during the game .",
                "the {team} keeps its {w} next to the {thing} .",
            ],
            "thing": ["ball", "pitch", "fast ball", "bench", "plate"],
            "material": ["wood", "ash wood", "maple", "aluminum"],
            "team": ["team", "home team", "school team", "league"],
            "adj": ["heavy", "wooden", "new", "old", "long"],
        },
    },
    "bank": {
        "river": {
            "templates": [
                "we sat on the {w} of the {water} and watched the {animal} .",
                "the {w} of the {water} was covered in {plant} .",
                "the {animal} climbed up the muddy {w} .",
                "after the flood the {water} overflowed its {w} .",
                "fishermen stood on the {adj} {w} of the {water} .",
            ],
            "water": ["river", "stream", "lake", "creek"],
            "animal": ["ducks", "frogs", "herons", "otters"],
            "plant": ["reeds", "grass", "moss", "willows"],
            "adj": ["steep", "muddy", "grassy", "far"],
        },
        "money": {
            "templates": [
                "she deposited her {money} at the {w} on monday .",
                "the {w} approved the {loan} for the new house .",
                "he opened an account at the {w} to save {money} .",
                "the {w} raised its interest rates on every {loan} .",
                "the {adj} {w} charges a fee for each {loan} .",
            ],
            "money": ["salary", "savings", "cash", "paycheck"],
            "loan": ["loan", "mortgage", "credit card", "account"],
            "adj": ["large", "local", "national", "private"],
        },
    },
    "plant": {
        "factory": {
            "templates": [
                "workers at the {w} build {product} all day .",
                "the {w} closed and hundreds of {people} lost their jobs .",
                "the power {w} burns {fuel} to make electricity .",
                "the {adj} {w} produces {product} for export .",
                "the company opened a new {w} near the highway .",
            ],
            "product": ["cars", "engines", "steel", "chemicals", "trucks"],
            "people": ["workers", "engineers", "employees"],
            "fuel": ["coal", "gas", "oil"],
            "adj": ["huge", "noisy", "nuclear", "old"],
        },
        "flora": {
            "templates": [
                "she waters the {w} in the {pot} every morning .",
                "the {w} grew tall {part} in the sun .",
                "water the {adj} {w} so its {part} stay green .",
                "a small {w} with red {part} stood by the window .",
                "the gardener put the {w} in a bigger {pot} .",
            ],
            "pot": ["pot", "garden", "greenhouse", "window box"],
            "part": ["leaves", "flowers", "stems", "roots"],
            "adj": ["green", "young", "tropical", "thirsty"],
        },
    },
    "spring": {
        "season": {
            "templates": [
                "in {w} the {nature} come back and the days get longer .",
                "the {w} rain made the {nature} grow .",
                "we plant {crop} every {w} when the snow melts .",
                "the {adj} {w} weather brought the {nature} back .",
                "birds return north in the {w} .",
            ],
            "nature": ["flowers", "birds", "trees", "leaves"],
            "crop": ["corn", "tomatoes", "beans", "potatoes"],
            "adj": ["early", "warm", "late", "rainy"],
        },
        "coil": {
            "templates": [
                "the {w} in the {device} snapped and the {part} stopped .",
                "he replaced the broken {w} inside the {device} .",
                "a steel {w} pushes the {part} back into place .",
                "the {adj} {w} in the mattress squeaked .",
                "compress the {w} before you close the {device} .",
            ],
            "device": ["clock", "watch", "pen", "door", "toy"],
            "part": ["hands", "latch", "button", "lever"],
            "adj": ["metal", "tight", "rusty", "loose"],
        },
    },
}

# Sentences without an ambiguous word, so the language model sees ordinary structure too.
FILLER_TEMPLATES = [
    "the {person} walked to the {building} in the morning .",
    "my {person} reads a {thing} every evening .",
    "the {person} said that the {thing} was on the table .",
    "a {adj} {person} opened the door of the {building} .",
    "they talked about the {thing} for a long time .",
]
FILLER_WORDS = {
    "person": ["teacher", "doctor", "neighbor", "child", "farmer", "student"],
    "building": ["school", "library", "station", "market", "office"],
    "thing": ["book", "letter", "newspaper", "story", "map"],
    "adj": ["tired", "happy", "young", "quiet"],
}


@dataclass(frozen=True)
class GeneratedSentence:
    """A sentence, and for one with an ambiguous word: the word, its position, its sense."""

    tokens: Tuple[str, ...]
    word: Optional[str] = None
    position: Optional[int] = None
    sense: Optional[str] = None

    @property
    def text(self) -> str:
        return " ".join(self.tokens)


def _fill(template: str, slots: Dict[str, object], rng: random.Random) -> List[str]:
    values = {
        name: rng.choice(choices)  # type: ignore
        for name, choices in slots.items()
        if name != "templates"
    }
    # A marker for the ambiguous word that cannot collide with a slot value.
    return template.format(w="\x00", **values).split()


def generate_sentences(
    count: int, seed: int, filler_fraction: float = 0.2, words: Optional[Sequence[str]] = None
) -> Iterator[GeneratedSentence]:
    """
    `count` sentences: a `filler_fraction` of plain filler, the rest one ambiguous word each,
    with words and senses drawn uniformly.
    """
    rng = random.Random(seed)
    words = list(words or SENSES)
    for _ in range(count):
        if rng.random() < filler_fraction:
            tokens = _fill(rng.choice(FILLER_TEMPLATES), FILLER_WORDS, rng)
            yield GeneratedSentence(tuple(tokens))
            continue
        word = rng.choice(words)
        sense = rng.choice(sorted(SENSES[word]))
        slots = SENSES[word][sense]
        tokens = _fill(rng.choice(slots["templates"]), slots, rng)  # type: ignore
        position = tokens.index("\x00")
        tokens[position] = word
        yield GeneratedSentence(tuple(tokens), word, position, sense)


def sense_tag(sentence: GeneratedSentence, index: int) -> str:
    """BIO tag of token `index` for the sense-tagging task: `B-bats.animal` or `O`."""
    if sentence.word is not None and index == sentence.position:
        return f"B-{sentence.word}.{sentence.sense}"
    return "O"


def tagged_line(sentence: GeneratedSentence) -> str:
    """The `sequence_tagging` reader's format: `word###TAG` separated by spaces."""
    return " ".join(
        f"{token}###{sense_tag(sentence, index)}" for index, token in enumerate(sentence.tokens)
    )
