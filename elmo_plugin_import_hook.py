"""
Makes old import paths of ELMo code work in every process of an environment where
elmo_plugin is installed, without the user importing `elmo_plugin` first:

    from allennlp.commands.elmo import ElmoEmbedder     # AllenNLP 0.9's path (1.0 removed it)

A `.pth` line runs this module at interpreter start-up (`make install` writes it; the wheel
carries it). It imports nothing and only appends a finder to `sys.meta_path`. Python asks a
finder at the end of that list only for modules that no other finder has, so it never changes
what AllenNLP provides (an installed AllenNLP 0.9 keeps its own module) and costs nothing in
processes that never import these names. Each old name maps to a module of
`elmo_plugin.compat`, whose names the old module gets.
"""
import sys

OLD_PATHS = {"allennlp.commands.elmo": "elmo_plugin.compat.allennlp_commands_elmo"}


class _CompatLoader:
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec):  # the default module object
        return None

    def exec_module(self, module) -> None:
        import importlib

        compat = importlib.import_module(self.target)
        module.__doc__ = compat.__doc__
        module.__dict__.update(
            (name, value) for name, value in vars(compat).items() if not name.startswith("__")
        )
        module.__all__ = list(getattr(compat, "__all__", ()))


class CompatFinder:
    """Finds the old import paths of `OLD_PATHS`, and nothing else."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        compat_module = OLD_PATHS.get(fullname)
        if compat_module is None:
            return None
        import importlib.util

        return importlib.util.spec_from_loader(fullname, _CompatLoader(compat_module))


def install() -> None:
    """Appends the finder to `sys.meta_path` once."""
    if not any(getattr(finder, "__name__", None) == "CompatFinder" for finder in sys.meta_path):
        sys.meta_path.append(CompatFinder)


install()
