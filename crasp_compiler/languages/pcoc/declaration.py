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
    input_help=(
        'INPUT is one input vector written out ("3 1 4 1"), or a file of them (default: '
        "stdin), one per line: n numbers per input slot."
    ),
    output_help=(
        "Prints each output vector on one line (`slot: ` first when there are several "
        "output slots)."
    ),
    mode_help=(
        "hard: average-hard routing, exact; softmax: softmax routing within --tolerance of it."
    ),
    compile_help=(
        "compiles for exactly --n machines: one layer per round (plus the MLP depth its local "
        "computations need), one routing head per source pattern."
    ),
)
