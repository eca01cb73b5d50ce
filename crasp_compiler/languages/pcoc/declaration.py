"""PCOC as the registry knows it before it is used (its implementation, imported on
first use, is :mod:`crasp_compiler.languages.pcoc.language`)."""

from crasp_compiler.languages.registry import Declaration, Option

DECLARATION = Declaration(
    name="pcoc",
    title="PCOC",
    suffixes=(".pcoc",),
    modes=("hard", "softmax"),
    options=(
        Option(
            "n",
            "Number of machines (PCOC programs).",
            frozenset({"interpret", "compile", "check"}),
            kind="int",
            minimum=1,
            required=frozenset({"interpret", "compile"}),
        ),
        Option(
            "tolerance",
            "PCOC softmax: largest distance of an output from the interpreter's, float "
            "rounding included (default: the rounding, plus one rounding of the outputs' bounds).",
            frozenset({"compile"}),
            kind="float",
            minimum=0,
            open_minimum=True,
        ),
        Option(
            "dtype",
            "PCOC softmax: the float type the tolerance is budgeted for (default float64).",
            frozenset({"compile"}),
            kind="choice",
            choices=("float64", "float32"),
        ),
    ),
    implementation="crasp_compiler.languages.pcoc.language:PCOC",
)
