"""
The interface every biLM weight format implements, and the functions that pick the format
from what the given paths hold.
"""
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy
from allennlp.common import Registrable
from allennlp.common.checks import ConfigurationError

from elmo_plugin.weights import pretrained
from elmo_plugin.weights.files import resolve_model_source
from elmo_plugin.weights.options import ElmoOptions

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelFiles:
    """
    The files a user named for a biLM, as given (paths or URLs, for messages) and on this
    machine (after `cached_path`). Either may be `None`; a format decides what it needs.
    """

    options_file: Optional[str]
    weight_file: Optional[str]
    options_path: Optional[str]
    weight_path: Optional[str]
    # The softmax's vocabulary, for formats whose files do not hold it (bilm-tf checkpoints).
    vocabulary_file: Optional[str] = None
    vocabulary_path: Optional[str] = None

    @classmethod
    def resolve(
        cls, options_file: Optional[str], weight_file: Optional[str], vocabulary_file: Optional[str] = None
    ) -> "ModelFiles":
        """
        Local paths for what the user named: downloads, archives extracted (`files`).

        A model directory or archive named as the weight file beside a published options URL
        (AllenNLP 0.9's `ElmoEmbedder(weight_file=X)`, whose options default to the original
        ELMo's) is read with the options it holds, when a format recognises it alone.
        """
        weight_path = None if weight_file is None else resolve_model_source(weight_file, "ELMo weight file")
        vocabulary_path = (
            None if vocabulary_file is None else resolve_model_source(vocabulary_file, "vocabulary file")
        )
        if (
            options_file is not None
            and weight_path is not None
            and os.path.isdir(weight_path)
            and pretrained.output_dim_of_published(options_file) is not None
        ):
            model_alone = cls(None, weight_file, None, weight_path, vocabulary_file, vocabulary_path)
            if any(weight_format.recognizes(model_alone) for weight_format in registered_formats()):
                logger.info("%s holds its own options: %s is not used", weight_file, options_file)
                return model_alone
        return cls(
            options_file=options_file,
            weight_file=weight_file,
            options_path=None if options_file is None else resolve_model_source(options_file, "ELMo options file"),
            weight_path=weight_path,
            vocabulary_file=vocabulary_file,
            vocabulary_path=vocabulary_path,
        )

    def describe(self) -> str:
        names = [name for name in (self.options_file, self.weight_file) if name is not None]
        return " and ".join(dict.fromkeys(names))

    def model_directory(self) -> Optional[str]:
        """The directory that holds the whole model, where one was named (as either file, or
        as both); `None` for anything else."""
        paths = {path for path in (self.options_path, self.weight_path) if path is not None}
        if len(paths) == 1:
            (path,) = paths
            if os.path.isdir(path):
                return path
        return None

    def contents(self) -> str:
        """What the named directories hold, for messages."""
        listed = []
        for path in dict.fromkeys(p for p in (self.options_path, self.weight_path) if p):
            if os.path.isdir(path):
                entries = sorted(os.listdir(path))
                listed.append(f"{path} holds {', '.join(entries[:20]) or 'nothing'}")
        return "; ".join(listed)


@dataclass
class BiLmWeights:
    """
    A biLM as every format reads and writes it: its architecture and its arrays, named and
    shaped as in `elmo_plugin.weights.layout` (the published layout and its extensions).
    """

    options: ElmoOptions
    arrays: Dict[str, numpy.ndarray]
    source: str
    # What a format holds beyond the biLM, by name (a TF-Hub module's layer mix).
    extras: Dict[str, Any] = field(default_factory=dict)
    # False: `arrays` holds only the vocabularies, and the parameters come from elsewhere (the
    # ELMo a trained model recorded, whose own state dict AllenNLP loads next: `recorded`).
    holds_parameters: bool = True


class WeightFormat(Registrable):
    """
    One way biLM weights are stored on disk (a module of `elmo_plugin.weights.formats`).
    `read_bilm_weights` asks every registered format whether it `recognizes` the given files;
    exactly one must.
    """

    # What the format's files look like, for the error when no format recognises a path.
    expects: str = ""

    def recognizes(self, files: ModelFiles) -> bool:
        """Whether `files` are of this format (judged from what the local paths hold)."""
        raise NotImplementedError

    def read(self, files: ModelFiles, options: Optional[ElmoOptions] = None) -> BiLmWeights:
        """
        The weights in `files`; `options`, where given, are the architecture to check them
        against instead of the format's own description. Errors name the file and the entry.
        """
        raise NotImplementedError

    def write(self, weights: BiLmWeights, directory: str) -> Dict[str, str]:
        """Writes `weights` into `directory`; returns the files written by role."""
        raise ConfigurationError(f"The ELMo weight format {self.name!r} can be read, not written.")

    @property
    def name(self) -> str:
        for name in WeightFormat.list_available():
            if WeightFormat.by_name(name) is type(self):
                return name
        return type(self).__name__


def registered_formats() -> List[WeightFormat]:
    """One instance of every registered format."""
    return [WeightFormat.by_name(name)() for name in sorted(WeightFormat.list_available())]


def format_named(name: str) -> WeightFormat:
    if name not in WeightFormat.list_available():
        raise ConfigurationError(
            f"Unknown ELMo weight format {name!r}; known: {', '.join(sorted(WeightFormat.list_available()))}"
        )
    return WeightFormat.by_name(name)()


PathOrOptions = Union[str, os.PathLike, ElmoOptions, None]


def read_bilm_weights(
    options_file: PathOrOptions,
    weight_file: Optional[Union[str, os.PathLike]],
    vocabulary_file: Optional[str] = None,
) -> BiLmWeights:
    """
    Reads a biLM's weights in whichever format the paths (or URLs, or archives) hold.
    `options_file` may be options already parsed, to check the weights of the published layout
    against; a model directory or archive may be named as either file, or as both.
    `vocabulary_file` is the softmax's vocabulary where the format does not hold it.
    """
    options, weights = read_bilm(options_file, weight_file, vocabulary_file)
    if weights is None:
        raise ConfigurationError(f"The ELMo options {options_file} need a weight file.")
    return weights


def read_bilm(
    options_file: PathOrOptions,
    weight_file: Optional[Union[str, os.PathLike]],
    vocabulary_file: Optional[str] = None,
) -> Tuple[ElmoOptions, Optional[BiLmWeights]]:
    """
    The architecture, and the weights where the paths hold them: an options file alone (or
    parsed options alone) describes a biLM to train from scratch.
    """
    options = options_file if isinstance(options_file, ElmoOptions) else None
    if options is not None:
        options_file = None
    if options is not None and weight_file is None:
        return options, None
    files = ModelFiles.resolve(
        None if options_file is None else os.fspath(options_file),
        None if weight_file is None else os.fspath(weight_file),
        vocabulary_file,
    )
    if files.weight_path is None and files.options_path is not None and os.path.isfile(files.options_path):
        return ElmoOptions.from_local_file(files.options_path, str(files.options_file)), None
    matching = [weight_format for weight_format in registered_formats() if weight_format.recognizes(files)]
    if options is not None and not matching:
        matching = [format_named("published")]  # a weight file named alone, for these options
    if len(matching) == 1:
        logger.debug("Reading %s as ELMo weight format %r", files.describe(), matching[0].name)
        weights = matching[0].read(files, options)
        refuse_non_finite(weights)
        return weights.options, weights
    if not matching:
        _refuse_weights_without_options(files)
        expected = "; ".join(f"{f.name}: {f.expects}" for f in registered_formats())
        found = files.contents()
        raise ConfigurationError(
            f"{files.describe() or 'Nothing'} is not a biLM in any known format "
            f"({found + '; ' if found else ''}expected {expected})."
        )
    raise ConfigurationError(
        f"{files.describe()} could be read as any of the ELMo weight formats "
        f"{', '.join(f.name for f in matching)}; their recognisers overlap."
    )


def refuse_non_finite(weights: BiLmWeights) -> None:
    """Refuses weights with a NaN or an infinity, naming the dataset and, for a matrix, the row:
    one such value makes every later layer NaN."""
    for name, array in weights.arrays.items():
        if array.dtype.kind != "f" or numpy.isfinite(array).all():
            continue
        bad = ~numpy.isfinite(array)
        where = f"row {int(numpy.argmax(bad.reshape(len(array), -1).any(axis=1)))}, " if array.ndim >= 2 else ""
        raise ConfigurationError(
            f"{weights.source}: the dataset '{name}' holds {int(bad.sum())} non-finite value(s) "
            f"(NaN or infinity; {where}index {numpy.unravel_index(int(numpy.argmax(bad)), array.shape)}); "
            "the file is damaged or was written by a diverged training run."
        )


def _refuse_weights_without_options(files: ModelFiles) -> None:
    """The one-line error for HDF5 weights named without options (a file, or a directory that
    holds .hdf5 files but no options.json)."""
    if files.options_path is not None or files.weight_path is None:
        return
    path = files.weight_path
    if os.path.isdir(path):
        entries = os.listdir(path)
        weight_files = sorted(entry for entry in entries if entry.endswith(".hdf5"))
        if not weight_files or "options.json" in entries:
            return
        held = f"{files.weight_file} holds biLM weights ({', '.join(weight_files)}) but no options.json"
    elif path.endswith(".hdf5"):
        held = f"{files.weight_file} is a biLM weight file, named without its options"
    else:
        return
    raise ConfigurationError(
        f"{held}: name the options file too (allennlp elmo --options-file OPTIONS.json; "
        f"options_file= in Python and configs), or put it beside the weights as options.json."
    )


def write_bilm_weights(weights: BiLmWeights, directory: str, format_name: str = "published") -> Dict[str, str]:
    """Writes `weights` into `directory` in format `format_name`; returns the paths by role."""
    os.makedirs(directory, exist_ok=True)
    return format_named(format_name).write(weights, directory)

