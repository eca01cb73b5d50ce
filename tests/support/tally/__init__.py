"""*Tally*: a small counting language, registered by the tests as a third language.

It is written only against the registry's :class:`~crasp_compiler.languages.registry.Language`
and the public building blocks (the :class:`~crasp_compiler.assemble.builder.Builder`, the
cookbook, the model types, :mod:`crasp_compiler.errors`), with nothing of C-RASP or PCOC:
the proof that adding a language is one folder and one ``register`` call.

A program (``.tally``) declares its symbols and names comparisons of prefix counts::

    # accept when yes leads no by more than one
    symbols yes no abstain
    lead:   count(yes) > count(no) + 1
    quorum: 2 * count(yes) >= length
    accept lead

Every rule is an output, decided at every prefix of the input (the empty one included);
``accept`` names the rule whose value at the whole input is the verdict. The option
``margin`` (``--margin K``) makes the strict comparisons need a lead of more than K.

Modules, as a language folder under ``crasp_compiler/languages/`` has them:
:mod:`.nodes` (the IR, with source spans), :mod:`.parse` (syntax and checks),
:mod:`.interpret` (the reference semantics, exact), :mod:`.rounding` (the float
horizons), :mod:`.lower` (blocks on a Builder, the compile entry), :mod:`.language` (the
``Language`` object) and :mod:`.declaration` (what ``register`` takes).
"""
