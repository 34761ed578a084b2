"""
The biLM's special words, in bilm-tf's convention: sentence boundaries and the unknown word.
They are words like any other in a biLM's softmax vocabulary, and the first three lines of a
bilm-tf vocab file.
"""
BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"
UNKNOWN_TOKEN = "<UNK>"
SPECIAL_TOKENS = (BOS_TOKEN, EOS_TOKEN, UNKNOWN_TOKEN)
