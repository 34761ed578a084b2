"""
The input text of the file engine (`embed_file`): how lines are read (UTF-8 bytes, a leading
byte-order mark dropped, whitespace-tokenized), the one validating pass before any work (every
problem with its line number; the digests that identify the input), and the chunks read again
later, each checked against its digest so that an input edited during a run is found.
"""
import hashlib
import os
from dataclasses import dataclass
from typing import Iterator, List, Sequence, Tuple

from allennlp.common.checks import ConfigurationError

from elmo_plugin.common.text_files import without_bom

_MAX_LINES_IN_MESSAGE = 10


@dataclass
class InputSummary:
    num_lines: int
    num_tokens: int
    sha256: str
    chunk_sha256: List[str]  # of each chunk's bytes, to find an input changed during the run


def sentence_of(raw_line: bytes) -> str:
    # split() drops "\r" of "\r\n" line ends and any run of spaces or tabs.
    return " ".join(raw_line.decode("utf-8").split())


def iterate_lines(input_path: str) -> Iterator[Tuple[int, bytes]]:
    with open(input_path, "rb") as handle:
        for index, raw_line in enumerate(handle):
            yield index, without_bom(raw_line) if index == 0 else raw_line


def _format_lines(line_numbers: List[int]) -> str:
    shown = ", ".join(str(n + 1) for n in line_numbers[:_MAX_LINES_IN_MESSAGE])
    more = len(line_numbers) - _MAX_LINES_IN_MESSAGE
    return shown + (f" and {more} more" if more > 0 else "")


def validate_input(
    input_path: str, use_sentence_keys: bool, forget_sentences: bool, allow_empty_lines: bool, chunk_size: int
) -> InputSummary:
    """
    One streaming pass: every problem is reported with its (1-based) line number; the file's
    digest (which identifies the input of a resumed run) and each chunk's are taken in the
    same read.
    """
    empty_lines: List[int] = []
    bad_keys: List[int] = []
    num_lines = num_tokens = 0
    digest = hashlib.sha256()
    chunk_digests: List[str] = []
    chunk_digest = hashlib.sha256()
    for index, raw_line in iterate_lines(input_path):
        digest.update(raw_line)
        chunk_digest.update(raw_line)
        if (index + 1) % chunk_size == 0:
            chunk_digests.append(chunk_digest.hexdigest())
            chunk_digest = hashlib.sha256()
        try:
            sentence = sentence_of(raw_line)
        except UnicodeDecodeError as error:
            raise ConfigurationError(
                f"{input_path}, line {index + 1}: not valid UTF-8 ({error.reason} at byte "
                f"{error.start} of the line); ELMo input must be UTF-8 text"
            ) from error
        num_lines += 1
        tokens = sentence.split()
        num_tokens += len(tokens)
        if not tokens:
            empty_lines.append(index)
        if use_sentence_keys and ("/" in sentence or sentence in ("", ".")):
            bad_keys.append(index)
    if num_lines == 0:
        raise ConfigurationError(f"{input_path} is empty: there is nothing to embed")
    if num_lines % chunk_size:
        chunk_digests.append(chunk_digest.hexdigest())
    if empty_lines and not allow_empty_lines:
        raise ConfigurationError(
            f"{input_path} has blank lines (line {_format_lines(empty_lines)}); remove them or "
            f"pass --allow-empty-lines to store them as empty entries under their line index"
        )
    if bad_keys:
        raise ConfigurationError(
            f"{input_path}: with --use-sentence-keys, line {_format_lines(bad_keys)} cannot be an "
            f"HDF5 dataset name (it contains '/', or is '.' or empty); use line-index keys instead"
        )
    return InputSummary(num_lines=num_lines, num_tokens=num_tokens, sha256=digest.hexdigest(),
                         chunk_sha256=chunk_digests)


def read_chunks(
    input_path: str, chunk_size: int, chunk_sha256: Sequence[str], partial_dir: str
) -> Iterator[Tuple[int, List[str]]]:
    """The input's chunks of `chunk_size` sentences, each checked against its digest from the
    start of the run (`InputSummary.chunk_sha256`): text changed in between would mix two
    versions of the input in one output. `partial_dir` is named in the error."""
    chunk: List[str] = []
    chunk_index = 0
    digest = hashlib.sha256()
    for _, raw_line in iterate_lines(input_path):
        digest.update(raw_line)
        chunk.append(sentence_of(raw_line))
        if len(chunk) == chunk_size:
            _check_chunk(input_path, chunk_size, chunk_sha256, chunk_index, digest, partial_dir)
            yield chunk_index, chunk
            chunk, chunk_index, digest = [], chunk_index + 1, hashlib.sha256()
    if chunk:
        _check_chunk(input_path, chunk_size, chunk_sha256, chunk_index, digest, partial_dir)
        yield chunk_index, chunk
    if chunk_index + (1 if chunk else 0) != len(chunk_sha256):
        raise input_changed(input_path, "its number of lines", partial_dir)


def _check_chunk(
    input_path: str, chunk_size: int, chunk_sha256: Sequence[str], chunk_index: int, digest: "hashlib._Hash",
    partial_dir: str,
) -> None:
    if chunk_index >= len(chunk_sha256) or digest.hexdigest() != chunk_sha256[chunk_index]:
        first = chunk_index * chunk_size + 1
        raise input_changed(input_path, f"lines {first}-{first + chunk_size - 1}", partial_dir)


def input_changed(input_path: str, what: str, partial_dir: str) -> ConfigurationError:
    return ConfigurationError(
        f"{input_path} changed during the run ({what} differ from what was read at the start): "
        f"one output would mix two versions of the text. The finished chunks are kept in "
        f"{partial_dir}: restore the input and run the same command with --resume, or pass "
        "--overwrite to start over with the new text"
    )


def not_a_regular_file(input_path: str) -> str:
    """What is wrong with an input that is not a regular file."""
    if input_path == "-" or (os.path.exists(input_path) and not os.path.isdir(input_path)):
        what = "standard input" if input_path == "-" else "a pipe or a device, not a regular file"
        return (
            f"Input {input_path} is {what}: allennlp elmo reads its input several times (to check "
            "it, to embed it, to key the vectors) and resumes from it, so it must be a file. Save "
            "the text first (e.g. `... > sentences.txt`) and embed that file"
        )
    if os.path.isdir(input_path):
        return f"Input {input_path} is a directory; give a text file with one sentence per line"
    return f"Input file {input_path} does not exist"
