"""`make demo`: the whole ELMo recipe on a generated corpus (see `elmo_plugin.demo.run`)."""
