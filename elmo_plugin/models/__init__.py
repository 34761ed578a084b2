# Re-exports: the public names of this subpackage.
# ruff: noqa: F401
from elmo_plugin.models.bilm import ElmoBiLmModel
from elmo_plugin.models import archive_format  # registers the trained biLM as a weight format
