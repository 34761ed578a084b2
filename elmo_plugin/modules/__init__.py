# Re-exports: the public names of this subpackage.
# ruff: noqa: F401
from elmo_plugin.modules.char_encoder import ElmoCharacterEncoder
from elmo_plugin.modules.elmo import Elmo
from elmo_plugin.modules.elmo_bilm import ElmoBiLm
from elmo_plugin.modules.elmo_lstm import ElmoLstm
from elmo_plugin.modules.lstm_cell import LstmCellWithProjection
from elmo_plugin.modules.settings import ElmoSettings
from elmo_plugin.modules.elmo_token_embedder import ElmoTokenEmbedder
