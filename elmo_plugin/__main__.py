"""
`python -m elmo_plugin <command> ...`: the `allennlp` command line with this plugin loaded.
Where the package is installed, `allennlp` itself has the plugin's subcommands in every
directory too (`elmo_plugin_import_hook`); this entry point does not depend on that hook.
(In an environment without AllenNLP, Python stops at the package's import with its one-line
`MissingDependencyError`, before this module runs.)
"""
from allennlp.commands import main
from allennlp.common.util import install_sigterm_handler

import elmo_plugin  # noqa: F401  (registers our components and subcommands)

if __name__ == "__main__":
    install_sigterm_handler()  # as the `allennlp` command does: SIGTERM unwinds like Ctrl-C
    main(prog="python -m elmo_plugin")
