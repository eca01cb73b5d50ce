"""Build transformers by hand from cookbook blocks on named residual variables.

::

    from crasp_compiler import Builder
    from crasp_compiler.cookbook import attention, ffn

    b = Builder(["(", ")"])
    depth = b.add(attention.average(b.token("(") - b.token(")"), "depth"))   # (#( − #))/(t+1)
    neg = b.add(ffn.gt_zero(-depth, "neg", tolerance=...))
    model = b.build({"depth": depth})

A *variable* is one residual dimension, named; a :class:`Form` is a linear combination of
variables. Inputs are declared (``bos``, ``nonbos``, ``token(a)``, ``embed``, ``feature``),
blocks read forms and write new variables, and :meth:`Builder.build` schedules the blocks
as early as their dependencies allow (independent blocks share a layer: parallel
composition; a block that reads another's output comes later: serial composition),
allocates one residual dimension per variable and lifts every block into global matrices
(the routing lemma: reading, copying and dropping variables is a choice of rows and
columns, never user index arithmetic). The result is a :class:`Model` that the numpy
executor and the torch module run and that saves to the model file format.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from crasp_compiler.assemble.assemble import (
    Allocation,
    allocate,
    assemble_layers,
    schedule,
    stored_entries,
)
from crasp_compiler.cookbook.blocks import Block, Exactness, FFNBlock, Form, HeadBlock, Unit, var
from crasp_compiler.errors import CraspError
from crasp_compiler.model.features import check_feature, feature_matrix
from crasp_compiler.model.model import (
    BOS,
    BUDGET_VARIABLE,
    DENSE_LIMIT,
    RULES,
    FloatArray,
    Guarantee,
    Model,
    Output,
    Provenance,
    Rule,
    dense,
    densified,
    matrix,
    parameter_budget,
    token_ids,
    with_kinds,
)

BOS_VAR, NONBOS_VAR = "BOS", "nonbos"


def token_var(symbol: str) -> str:
    return f"token:{symbol}"


def _finite(block: Block) -> bool:
    """Whether every number of ``block`` is a finite float64."""
    if isinstance(block, HeadBlock):
        forms = [*block.query, *block.key, *block.values.values()]
        numbers = [block.scale, *block.bias.values()]
    else:
        forms = [unit.form for unit in block.units]
        numbers = [unit.bias for unit in block.units] + list(block.constants.values())
        numbers += [c for coefs in block.outputs.values() for c in coefs.values()]
    numbers += [c for form in forms for c in form.values()]
    return bool(np.isfinite(np.asarray(numbers, dtype=np.float64)).all())


class Builder:
    """Declare inputs, add blocks, build a :class:`Model` (see the module docstring).

    Always-present inputs: ``bos`` (1 at the BOS position, 0 at tokens), ``nonbos`` (the
    opposite), ``one`` (their sum, 1 everywhere) and ``token(a)`` (1 where the token is
    ``a``) for every symbol of the alphabet.
    """

    def __init__(self, alphabet: Sequence[str]) -> None:
        symbols = list(alphabet)
        if len(set(symbols)) != len(symbols) or BOS in symbols:
            raise ValueError(f"the alphabet must be distinct symbols other than {BOS!r}")
        self.vocab = [BOS, *symbols]
        # variable -> value per vocabulary entry (index 0 is BOS)
        self._embeddings: dict[str, list[float]] = {
            BOS_VAR: [1.0] + [0.0] * len(symbols),
            NONBOS_VAR: [0.0] + [1.0] * len(symbols),
        }
        for k, symbol in enumerate(symbols, start=1):
            row = [0.0] * len(self.vocab)
            row[k] = 1.0
            self._embeddings[token_var(symbol)] = row
        self.features: list[str] = []
        self.numeric_inputs: list[str] = []
        self._inputs: set[str] = set()  # features and numeric inputs, for fast lookups
        self.blocks: list[Block] = []
        self._written: dict[str, str] = {}  # variable -> label of the block that made it
        self._counter = 0

    # ------------------------------------------------------------------ inputs

    @property
    def bos(self) -> Form:
        return var(BOS_VAR)

    @property
    def nonbos(self) -> Form:
        return var(NONBOS_VAR)

    @property
    def one(self) -> Form:
        """The constant 1 at every position (``bos + nonbos``)."""
        return var(BOS_VAR) + var(NONBOS_VAR)

    def token(self, symbol: str) -> Form:
        """1 at positions holding ``symbol``, 0 elsewhere (BOS included)."""
        if token_var(symbol) not in self._embeddings:
            raise ValueError(f"{symbol!r} is not in the alphabet {self.vocab[1:]}")
        return var(token_var(symbol))

    def embed(self, name: str, values: Mapping[str, float], bos: float = 0.0) -> Form:
        """A token-embedding variable: ``values[a]`` at tokens ``a`` (0 for symbols not
        listed) and ``bos`` at BOS."""
        self._check_new(name)
        unknown = set(values) - set(self.vocab[1:])
        if unknown:
            raise ValueError(f"embedding {name!r} names symbols not in the alphabet: {unknown}")
        self._embeddings[name] = [bos] + [float(values.get(s, 0.0)) for s in self.vocab[1:]]
        return var(name)

    def feature(self, name: str) -> Form:
        """A positional feature (see :mod:`crasp_compiler.model.features`), declared once."""
        check_feature(name)
        if name not in self._inputs:
            self.features.append(name)
            self._inputs.add(name)
        return var(name)

    def numeric(self, name: str) -> Form:
        """A numeric input channel: the real number given for each token at run time
        (``run(..., values=...)``), 0 at BOS."""
        self._check_new(name)
        self.numeric_inputs.append(name)
        self._inputs.add(name)
        return var(name)

    def input_values(self, tokens: Sequence[str]) -> dict[str, FloatArray]:
        """Every embedding and positional-feature variable at each position of
        ``tokens`` (BOS first, shape ``(len(tokens) + 1,)``): what the blocks read, to
        evaluate them without assembling a model
        (:func:`~crasp_compiler.cookbook.blocks.evaluate_blocks`). Numeric inputs are the
        caller's; a token outside the vocabulary raises ValueError."""
        ids = [0, *token_ids(self.vocab, list(tokens))]
        out = {
            name: np.asarray(row, dtype=np.float64)[ids] for name, row in self._embeddings.items()
        }
        table = feature_matrix(self.features, len(ids))
        out.update({name: table[:, k] for k, name in enumerate(self.features)})
        return out

    def fresh(self, stem: str) -> str:
        """A variable name not used yet: ``stem#k``."""
        self._counter += 1
        return f"{stem}#{self._counter}"

    # ------------------------------------------------------------------ blocks

    @property
    def variables(self) -> list[str]:
        """Every variable in residual order: embeddings, features, numeric inputs, block
        outputs."""
        return [*self._embeddings, *self.features, *self.numeric_inputs, *self._written]

    @property
    def inputs(self) -> set[str]:
        """The variables no block writes: embeddings, features, numeric inputs."""
        return set(self._embeddings) | set(self.features) | set(self.numeric_inputs)

    def slots(self) -> list[int]:
        """Every block's slot (1-based; odd = attention, even = MLP), as ``build`` places it
        (:func:`~crasp_compiler.assemble.assemble.schedule`)."""
        return schedule(self.blocks, self.inputs)

    def add(self, block: Block) -> Form:
        """Add ``block`` and return the form of its first output (read any others with
        :func:`~crasp_compiler.cookbook.blocks.var`)."""
        label = block.label or type(block).__name__
        for name in sorted(block.in_place) if block.in_place else ():
            if not self._defined(name):
                raise ValueError(f"block {label!r} updates {name!r}, which does not exist")
        undefined = [name for name in block.reads if not self._defined(name)]
        if undefined:
            name = min(undefined)
            raise ValueError(f"block {label!r} reads {name!r}, which is not defined yet")
        writes = [name for name in block.writes if name not in block.in_place]
        for name in writes:
            self._check_new(name, label)
        for name in writes:
            self._written[name] = label
        self.blocks.append(block)
        return var(block.writes[0]) if block.writes else Form()

    def include(self, model: Model, prefix: str) -> dict[str, tuple[Form, str]]:
        """Add a built model's computation and return its outputs as ``name -> (form, rule)``.

        Every residual dimension of ``model`` becomes a form: its embedding column (a
        variable ``prefix:k:label``) plus its positional part, plus one fresh variable per
        sublayer that writes to it. Each head and each MLP becomes one block that reads
        the forms as they stand before its layer, so the computation is the model's own
        (the routing lemma: only rows and columns move). Including two models is their
        parallel composition (independent blocks share layers); adding blocks that read
        the returned forms is serial composition. The model's symbols must be in this
        builder's alphabet; symbols it does not know embed as 0. An output comes back
        under its decision rule: a ``bool`` output is decided ``> 1/2`` and its raw value
        need not be 0 or 1 (a compiled readout may absorb a final and/or); where a {0,1}
        value is needed, ``ffn.clamp(form, 0, 1, …)`` makes one from an integer output.
        """
        unknown = set(model.vocab[1:]) - set(self.vocab[1:])
        if unknown:
            raise ValueError(f"model {prefix!r} has symbols outside the alphabet: {unknown}")
        exact = Exactness(f"{prefix}: {model.guarantee.text}", max_len=model.guarantee.max_len)
        model = densified(model)
        row = {symbol: k for k, symbol in enumerate(model.vocab)}
        w_p = dense(model.w_p)
        current: list[Form] = []
        for k, label in enumerate(model.residual):
            column = model.w_e[:, k]
            form = Form()
            if np.any(column):
                embedded = {s: float(column[row[s]]) for s in self.vocab[1:] if s in row}
                form = self.embed(f"{prefix}:{k}:{label}", embedded, bos=float(column[0]))
            for f, name in enumerate(model.features):
                if w_p[k, f]:
                    form = form + float(w_p[k, f]) * self.feature(name)
            current.append(form)

        def read(row_weights: FloatArray) -> Form:
            out = Form()
            for k in map(int, np.flatnonzero(row_weights)):
                out = out + float(row_weights[k]) * current[k]
            return out

        def written(where: str, k: int) -> str:
            return self.fresh(f"{prefix}:{where}:{model.residual[k]}")

        for number, layer in enumerate(model.layers, start=1):
            updates: list[tuple[int, str]] = []
            for h, head in enumerate(layer.heads):
                mixed = dense(head.w_o) @ dense(head.w_v)  # residual <- residual via the head
                values: dict[str, Mapping[str, float]] = {}
                for k in map(int, np.flatnonzero(np.any(mixed != 0, axis=1))):
                    name = written(f"L{number}h{h}", k)
                    values[name] = read(mixed[k])
                    updates.append((k, name))
                if values:
                    block = HeadBlock(
                        query=[read(r) for r in dense(head.w_q)],
                        key=[read(r) for r in dense(head.w_k)],
                        values=values,
                        exact=exact,
                        bias=dict(head.bias),
                        weighting=head.weighting,
                        mask=head.mask,
                        scale=head.scale,
                        label=f"{prefix}: {head.label or f'layer {number} head {h}'}",
                    )
                    self.add(block)
            for k, name in updates:
                current[k] = current[k] + var(name)
            if layer.mlp is None:
                continue
            mlp = layer.mlp
            w1, w2 = dense(mlp.w1), dense(mlp.w2)
            units = [
                Unit(read(w1[u]), float(mlp.b1[u]), mlp.activations[u]) for u in range(len(mlp.b1))
            ]
            outputs: dict[str, dict[int, float]] = {}
            constants: dict[str, float] = {}
            targets = {
                int(k): written(f"L{number}mlp", int(k))
                for k in np.flatnonzero(np.any(w2 != 0, axis=1) | (mlp.b2 != 0))
            }
            for k, name in targets.items():
                outputs[name] = {int(u): float(w2[k, u]) for u in np.flatnonzero(w2[k])}
                if mlp.b2[k]:
                    constants[name] = float(mlp.b2[k])
            if targets:
                self.add(
                    FFNBlock(
                        units,
                        outputs,
                        exact,
                        label=f"{prefix}: layer {number} mlp",
                        constants=constants,
                        norm_groups=[list(g) for g in mlp.norm_groups],
                    )
                )
                for k, name in targets.items():
                    current[k] = current[k] + var(name)
        return {out.name: (read(out.weights), out.rule) for out in model.outputs}

    def _defined(self, name: str) -> bool:
        return name in self._embeddings or name in self._written or name in self._inputs

    def _check_new(self, name: str, label: str = "") -> None:
        if self._defined(name):
            where = f" (in block {label!r})" if label else ""
            raise ValueError(
                f"variable {name!r} is already defined{where}; "
                "use a new name, or in_place to add to it"
            )

    # ------------------------------------------------------------------ model

    def build(
        self,
        outputs: Mapping[str, Mapping[str, float] | tuple[Mapping[str, float], str]],
        *,
        guarantee: Guarantee | None = None,
        accept: str | None = None,
        options: Mapping[str, object] | None = None,
        info: Mapping[str, object] | None = None,
        source: str = "",
        max_parameters: int | None = None,
        filename: str = "<model>",
        labels: Mapping[str, str] | None = None,
        reuse: bool | None = None,
        provenance: Provenance | None = None,
    ) -> Model:
        """The model whose named outputs are ``outputs``: ``name -> form`` (rule
        ``value``, the raw number) or ``name -> (form, rule)`` with a rule from
        :data:`crasp_compiler.model.model.RULES`. The guarantee defaults to the weakest
        exactness condition of the blocks.

        Before any matrix is made, the numbers the model would store are counted; above
        ``max_parameters`` (default :func:`~crasp_compiler.model.model.parameter_budget`)
        a :class:`CraspError` (naming ``filename``) says so instead.

        ``labels`` names variables for people (default: the variable's own name).
        ``reuse=True`` lets a dead variable's dimension hold a later one, ``False`` gives
        every variable its own, and the default ``None`` takes whichever makes the
        model's matrices smaller (counted dense, as a dense runtime holds them) (:func:`~crasp_compiler.assemble.assemble.allocate`); the
        model then records which label each dimension holds at each stage
        (:meth:`Model.labels_at`)."""
        variables = self.variables
        inputs = self.inputs
        slots = self.slots()
        specs = {
            name: spec if isinstance(spec, tuple) else (spec, "value")
            for name, spec in outputs.items()
        }
        kept = {variable for form, _ in specs.values() for variable in form}
        plans = [
            allocate(self.blocks, slots, variables, len(inputs), kept, reuse=flag)
            for flag in ((False, True) if reuse is None else (reuse,))
        ]
        plan = min(plans, key=lambda p: self._stored(p, slots, len(outputs), math.inf))
        stored = self._stored(plan, slots, len(outputs), DENSE_LIMIT)
        index, width = plan.dims, plan.width
        blocks = [*self.blocks, *(block for block, _ in plan.cancels)]
        slots = [*slots, *(slot for _, slot in plan.cancels)]
        budget = parameter_budget() if max_parameters is None else max_parameters
        if stored > budget:
            raise CraspError(
                f"the model would store about {stored:,} numbers ({stored * 8 / 2**30:.1f} GiB "
                f"in float64; {len(self.blocks):,} blocks, residual width {width:,}), above "
                f"the budget of {budget:,}; raise it with the environment variable "
                f"{BUDGET_VARIABLE} (or max_parameters=), or simplify the program",
                filename=filename,
            )
        w_e = np.zeros((len(self.vocab), width))
        for name, column in self._embeddings.items():
            w_e[:, index[name]] = column
        w_p = matrix(
            (width, len(self.features)),
            [index[name] for name in self.features],
            range(len(self.features)),
            [1.0] * len(self.features),
        )
        w_x = np.zeros((width, len(self.numeric_inputs)))
        for channel, name in enumerate(self.numeric_inputs):
            w_x[index[name], channel] = 1.0
        for block in self.blocks:
            if not _finite(block):
                raise CraspError(
                    f"block {block.label or type(block).__name__!r} has a weight that is not a "
                    "finite float64 number (an expression overflows)",
                    filename=filename,
                )
        layers = assemble_layers(blocks, slots, index, width)
        label_of = dict(labels or {})
        occupants = [
            [(stage, label_of.get(variable, variable)) for stage, variable in dimension]
            for dimension in plan.occupants
        ]
        occupied = [[label for _, label in dimension if label] for dimension in occupants]

        model_outputs = []
        for name, (form, rule) in specs.items():
            if rule not in RULES:
                raise ValueError(f"output {name!r}: rule must be one of {RULES}, not {rule!r}")
            weights = np.zeros(width)
            for variable, coef in form.items():
                if variable not in index:
                    raise ValueError(f"output {name!r} reads {variable!r}, which is not defined")
                weights[index[variable]] += coef
            model_outputs.append(Output(name, weights, Rule(rule)))
        if accept is not None and not any(
            o.name == accept and o.rule == "bool" for o in model_outputs
        ):
            raise ValueError(f"accept must name a bool output, not {accept!r}")

        model = Model(
            vocab=list(self.vocab),
            w_e=w_e,
            features=list(self.features),
            w_p=w_p,
            layers=layers,
            outputs=model_outputs,
            residual=[" → ".join(names) for names in occupied],
            occupants=occupants if plan.reuses else None,
            guarantee=guarantee or self.guarantee(),
            accept=accept,
            options=dict(options or {}),
            source=source,
            info={"exactness": self.exactness(), **(info or {})},
            inputs=list(self.numeric_inputs),
            w_x=w_x if self.numeric_inputs else None,
            provenance=provenance,
        )
        return with_kinds(model)  # every head records its kind (crasp_compiler.model.model)

    def _stored(self, plan: Allocation, slots: list[int], outputs: int, limit: float) -> int:
        """The numbers the model would store under ``plan`` with matrices dense up to
        ``limit`` entries (:func:`stored_entries`, plus the embeddings, positional and
        numeric maps and the readout)."""
        width = plan.width
        blocks = [*self.blocks, *(block for block, _ in plan.cancels)]
        every = [*slots, *(slot for _, slot in plan.cancels)]
        features = width * len(self.features)  # W_P: one 1 per feature, sparse when large
        stored = stored_entries(blocks, every, width, limit)
        stored += width * (len(self.vocab) + len(self.numeric_inputs) + outputs)
        return stored + (features if features <= limit else len(self.features))

    def exactness(self) -> list[str]:
        """The distinct exactness conditions of the blocks."""
        return sorted({block.exact.text for block in self.blocks})

    def guarantee(self) -> Guarantee:
        """The weakest condition of the blocks: the shortest length bound, and whether any
        block is approximate."""
        bounds = [b.exact.max_len for b in self.blocks if b.exact.max_len is not None]
        max_len = min(bounds) if bounds else None
        approximate = [b.exact.text for b in self.blocks if not b.exact.exact]
        if approximate:
            where = f" for inputs of length <= {max_len}" if max_len is not None else ""
            return Guarantee(max_len, f"approximate{where}: " + "; ".join(sorted(set(approximate))))
        if max_len is None:
            return Guarantee(None, "exact at every length in real arithmetic")
        return Guarantee(max_len, f"exact for inputs of length <= {max_len}")
