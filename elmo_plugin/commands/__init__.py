# Re-exports: the public names of this subpackage.
# ruff: noqa: F401
from elmo_plugin.commands.elmo import ElmoCommand
from elmo_plugin.commands.export import ElmoExportCommand
from elmo_plugin.commands.import_bilm import ElmoImportCommand
from elmo_plugin.commands.token_vectors import ElmoTokenVectorsCommand
