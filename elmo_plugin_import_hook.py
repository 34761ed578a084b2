"""
Runs at interpreter start-up in every process of an environment where elmo_plugin is installed
(a `.pth` line: `make install` writes it, the wheel carries it). It imports nothing; it only
adds two import finders, which act on three module names and on nothing else:

1. **`allennlp` finds the plugin in every directory.** AllenNLP reads plugin names only from
   `.allennlp_plugins` in the working directory and `~/.allennlp/plugins`, and builds its
   subcommands before it reads `--include-package`, so `allennlp elmo` would exist only where
   such a file names `elmo_plugin`. When `allennlp.common.plugins` is loaded, its
   `discover_plugins` is wrapped to yield `elmo_plugin` first (then the files' plugins, without
   it again). AllenNLP imports the plugins it discovers only in `import_plugins()` (the
   `allennlp` command line, `Predictor.from_archive`, distributed training workers): a process
   that merely imports AllenNLP modules does not import `elmo_plugin`. Set
   `ELMO_PLUGIN_AUTOLOAD=0` to keep AllenNLP's own ELMo classes in `allennlp` commands (a
   plugins file or `--include-package elmo_plugin` still loads this one).

2. **Old import paths of ELMo code work without importing `elmo_plugin` first:**

       from allennlp.commands.elmo import ElmoEmbedder     # AllenNLP 0.9's path (1.0 removed it)

   A finder at the end of `sys.meta_path` is asked only for modules that no other finder has,
   so it never changes what AllenNLP provides (an installed AllenNLP 0.9 keeps its own module).
   Each old name maps to a module of `elmo_plugin.compat`, whose names the old module gets.
"""
import os
import sys

OLD_PATHS = {"allennlp.commands.elmo": "elmo_plugin.compat.allennlp_commands_elmo"}

PLUGIN = "elmo_plugin"
ALLENNLP_PLUGINS_MODULE = "allennlp.common.plugins"
AUTOLOAD_VARIABLE = "ELMO_PLUGIN_AUTOLOAD"


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


def register_with(plugins_module) -> None:
    """Makes `plugins_module.discover_plugins` (AllenNLP's) yield `elmo_plugin` first."""
    discover_from_files = plugins_module.discover_plugins
    if getattr(discover_from_files, "registers", None) == PLUGIN:
        return

    def discover_plugins():
        yield PLUGIN
        for name in discover_from_files():
            if name != PLUGIN:
                yield name

    discover_plugins.__doc__ = discover_from_files.__doc__
    discover_plugins.registers = PLUGIN
    plugins_module.discover_plugins = discover_plugins


class _RegisteringLoader:
    """AllenNLP's loader of `allennlp.common.plugins`, then `register_with` on the module."""

    def __init__(self, loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        register_with(module)

    def __getattr__(self, name):  # get_source, get_filename, ... as the file loader has them
        return getattr(self._loader, name)


class AllenNlpPluginFinder:
    """Finds `allennlp.common.plugins` as Python would, with `_RegisteringLoader`."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname != ALLENNLP_PLUGINS_MODULE or os.environ.get(AUTOLOAD_VARIABLE) == "0":
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(fullname, path, target)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _RegisteringLoader(spec.loader)
        return spec


def install() -> None:
    """Adds both finders to `sys.meta_path`, once."""
    names = {getattr(finder, "__name__", None) for finder in sys.meta_path}
    if "AllenNlpPluginFinder" not in names:
        sys.meta_path.insert(0, AllenNlpPluginFinder)
    if "CompatFinder" not in names:
        sys.meta_path.append(CompatFinder)


install()
