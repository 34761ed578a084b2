from elmo_plugin.weights.options import ElmoOptions
