"""Pictures of a compiled model on one input (``crasp show``): the residual stream after
every sublayer, every head's attention pattern, each output's decision per position (and
beside it with a head, MLP or variable ablated or patched: :func:`intervene`), as
matplotlib figures (:mod:`.figures`, matplotlib imported lazily) or one self-contained
HTML page (:mod:`.html`); and where each definition lives (:mod:`.data`, also used by
``crasp info``).

::

    from crasp_compiler import api
    from crasp_compiler.show import residual_figure, page

    model = api.load_model("dyck1.npz")
    residual_figure(model, "( ( ) )").savefig("dyck1.png")
"""

from crasp_compiler.show.data import (
    Intervention,
    Trace,
    definitions,
    intervene,
    program_graph,
    read_input,
    sites,
    trace,
)
from crasp_compiler.show.figures import (
    all_figures,
    attention_figure,
    outputs_figure,
    program_figure,
    residual_figure,
)
from crasp_compiler.show.html import page

__all__ = [
    "Intervention",
    "Trace",
    "all_figures",
    "attention_figure",
    "definitions",
    "intervene",
    "outputs_figure",
    "page",
    "program_figure",
    "program_graph",
    "read_input",
    "residual_figure",
    "sites",
    "trace",
]
