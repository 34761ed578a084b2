"""
bilm-tf's vocab file: one word per line, most frequent first, `<S>`, `</S>` and `<UNK>` on the
first three lines (a softmax vocabulary), or any word list.
"""
from typing import Dict, List

from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path

from elmo_plugin.common.atomic_file import write_text_atomically
from elmo_plugin.common.text_files import TEXT_ENCODING
from elmo_plugin.data.special_tokens import SPECIAL_TOKENS

# What bilm-tf, the NLPL models and our exports call the file beside the weights.
VOCAB_FILE_NAME = "vocab.txt"


def read_bilm_vocab_file(vocab_file: str, require_special_tokens: bool = True) -> List[str]:
    """
    Reads a bilm-tf vocab file: one word per line (a second column, such as a count, is
    ignored, as bilm-tf does). Blank lines, duplicates and (unless `require_special_tokens` is
    false: a plain word list) missing special tokens are errors that name the file and line.
    """
    # What the errors call the file: a word list (`elmo-token-vectors`) is no softmax vocabulary.
    kind = "biLM vocab file" if require_special_tokens else "word list"
    try:
        local_path = cached_path(vocab_file)
    except FileNotFoundError as error:
        raise ConfigurationError(f"{kind} {vocab_file} not found.") from error
    words: List[str] = []
    first_line: Dict[str, int] = {}
    with open(local_path, encoding=TEXT_ENCODING) as handle:
        for line_number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                raise ConfigurationError(
                    f"{kind} {vocab_file}, line {line_number}: blank line (expected "
                    "one word per line)."
                )
            word = fields[0]
            if word in first_line:
                raise ConfigurationError(
                    f"{kind} {vocab_file}, line {line_number}: '{word}' already "
                    f"appears on line {first_line[word]}."
                )
            first_line[word] = line_number
            words.append(word)
    missing = [token for token in SPECIAL_TOKENS if token not in first_line]
    if missing and require_special_tokens:
        raise ConfigurationError(
            f"biLM vocab file {vocab_file} lacks {', '.join(missing)}: a biLM vocabulary needs "
            f"{', '.join(SPECIAL_TOKENS)} (bilm-tf puts them on the first three lines)."
        )
    return words


def write_bilm_vocab_file(path: str, words: List[str]) -> None:
    """Writes `words` one per line, the format `read_bilm_vocab_file` reads (atomically)."""
    write_text_atomically(path, "".join(f"{word}\n" for word in words))
