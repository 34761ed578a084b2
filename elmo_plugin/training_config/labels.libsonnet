// The label sets of the tasks, known in advance: a config lists them in its vocabulary so that
// evaluating on standard test data works whatever labels the training data happened to hold
// (AllenNLP's label namespaces have no unknown entry: an unseen label is a KeyError).
{
  // Every tag of `types` in an encoding (BIOUL: B-, I-, L-, U-; BIO: B-, I-), and O.
  tags(types, prefixes):: ['O'] + std.flattenArrays([[prefix + '-' + type for type in types] for prefix in prefixes]),
  bioul(types):: $.tags(types, ['B', 'I', 'L', 'U']),
  bio(types):: $.tags(types, ['B', 'I']),

  // CoNLL-2003's entity types and CoNLL-2000's chunk types.
  ner_types:: ['PER', 'LOC', 'ORG', 'MISC'],
  chunk_types:: ['ADJP', 'ADVP', 'CONJP', 'INTJ', 'LST', 'NP', 'PP', 'PRT', 'SBAR', 'UCP', 'VP'],

  // OntoNotes 5.0 (CoNLL-2012) PropBank roles: the verb, numbered arguments, modifiers, and
  // their continuation (C-) and reference (R-) forms.
  local core = ['ARG0', 'ARG1', 'ARG2', 'ARG3', 'ARG4', 'ARG5', 'ARGA'],
  local modifiers = ['ARGM-' + m for m in ['ADJ', 'ADV', 'CAU', 'COM', 'DIR', 'DIS', 'DSP', 'EXT', 'GOL',
                                           'LOC', 'LVB', 'MNR', 'MOD', 'NEG', 'PNC', 'PRD', 'PRP', 'PRR',
                                           'PRX', 'REC', 'TMP']],
  srl_roles:: ['V', 'C-V'] + core + modifiers + ['C-' + r for r in core + modifiers] + ['R-' + r for r in core + modifiers],
}
