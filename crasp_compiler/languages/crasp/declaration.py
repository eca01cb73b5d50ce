"""C-RASP as the registry knows it before it is used (its implementation, imported on
first use, is :mod:`crasp_compiler.languages.crasp.language`)."""

from crasp_compiler.languages.registry import Declaration, Option

DECLARATION = Declaration(
    name="crasp",
    title="C-RASP",
    suffixes=(".crasp", ".cr"),
    modes=("heaviside", "layernorm", "relu"),
    options=(
        Option(
            "alphabet",
            "Whitespace-separated symbols; overrides the program's alphabet.",
            frozenset({"load"}),
            metavar="SYMBOLS",
        ),
        Option(
            "max_len",
            "Longest input a relu model must be exact for.",
            frozenset({"compile"}),
            kind="int",
            minimum=0,
        ),
    ),
    implementation="crasp_compiler.languages.crasp.language:CRASP",
    input_help=(
        'INPUT is a whitespace-separated token string, e.g. "( ( ) )"; without it, one input '
        "per stdin line (blank and `//` lines skipped, a line holding only ε is the empty "
        "string)."
    ),
    output_help=(
        "Prints True or False per input: whether the acceptance output holds at the last position."
    ),
    mode_help=(
        "heaviside: Heaviside units, exact at every length; layernorm: ReLU units and "
        "layer-norm signs, exact at every length; relu: plain softmax/ReLU model, exact up "
        "to --max-len."
    ),
)
