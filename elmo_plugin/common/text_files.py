"""
How the package reads text files: UTF-8, with a leading byte-order mark dropped. Editors on
Windows (Notepad, Excel's "UTF-8 CSV") start files with one; it is a marker, not text, and read
as text it would become part of the first token, word or key.
"""

# Python's codec for UTF-8 that drops a leading byte-order mark, for files opened as text.
TEXT_ENCODING = "utf-8-sig"
UTF8_BOM = b"\xef\xbb\xbf"


def without_bom(first_line: bytes) -> bytes:
    """A file's first line, read as bytes, without its byte-order mark."""
    return first_line[len(UTF8_BOM):] if first_line.startswith(UTF8_BOM) else first_line
