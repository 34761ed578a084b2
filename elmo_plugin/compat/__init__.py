"""
Old import paths of ELMo code, served by this package: each module here is what one old path
provides, and `elmo_plugin_import_hook` (run at interpreter start-up by the `.pth` file that
`make install` and the wheel install) maps the old name to it; and adapters for other ELMo
libraries' APIs, imported under this package's name (`simple_elmo`: NLPL's `ElmoModel`).
"""
