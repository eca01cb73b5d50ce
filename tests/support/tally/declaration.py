"""Tally as the registry knows it before it is used: ``register(DECLARATION)`` makes the
CLI's flags and look-ups know it, and :data:`~tests.support.tally.language.TALLY` is
imported on first use."""

from crasp_compiler.languages.registry import Declaration, Option

DECLARATION = Declaration(
    name="tally",
    title="Tally",
    suffixes=(".tally",),
    modes=("heaviside",),
    options=(
        Option(
            "margin",
            "Tally: the lead a strict comparison needs (L > R holds when L > R + K; default 0).",
            frozenset({"load"}),
            kind="int",
            minimum=0,
            metavar="K",
        ),
    ),
    implementation="tests.support.tally.language:TALLY",
    input_help=(
        'INPUT is a whitespace-separated token string, e.g. "yes no yes"; without it, one '
        "input per stdin line (blank and # lines skipped, a line holding only ε is the "
        "empty input)."
    ),
    output_help="Prints True or False per input: whether the accept rule holds at the input.",
)
