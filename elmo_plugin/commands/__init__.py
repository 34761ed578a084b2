from elmo_plugin.commands.elmo import ElmoCommand
