# Re-exports: the public names of this subpackage.
# ruff: noqa: F401
from elmo_plugin.inference.elmo_embedder import ElmoEmbedder
from elmo_plugin.inference.embed_file import embed_file
