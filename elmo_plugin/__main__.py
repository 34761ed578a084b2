"""
`python -m elmo_plugin <command> ...`: the `allennlp` command line with this plugin loaded,
from any directory. (`allennlp` itself finds plugin subcommands such as `elmo` only through a
`.allennlp_plugins` file in the working directory or `~/.allennlp/plugins`.)
"""
from allennlp.commands import main

import elmo_plugin  # noqa: F401  (registers our components and subcommands)

if __name__ == "__main__":
    main(prog="python -m elmo_plugin")
