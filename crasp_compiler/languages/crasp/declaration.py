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
)
