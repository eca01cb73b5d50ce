"""Lower data-dependent ``send`` statements to fixed-pattern PCOC rounds (offset routing).

:func:`lower_sends` (``Program``, n → ``Program``) replaces every round with sends by
``k = ⌈log₂ n⌉`` rounds (1 for n = 1) whose receives all have static sources, plus
local computation; the output uses only the existing constructs, so the interpreter runs
it and the compiler compiles it. The lowered program is for exactly ``n`` machines: it
is unrolled (loop variables and ``r`` of the original rounds become numbers). (The
module keeps its name from the Beneš routing of Lemma B.1 it replaced; see below.)

**The construction.** A tuple sent by machine u to destination d has the *offset*
``r = (d − u) mod n``; it travels ``+2^b`` machines (mod n) in round b exactly where bit
b of r is 1, so after rounds ``0..k−1`` it sits at ``u + r ≡ d``. Machine j holds, after
round b, one entry ``E_b[q] = (v, x)`` per remaining offset ``q·2^{b+1}``,
``q < ⌈n / 2^{b+1}⌉`` (``v`` a valid flag, ``x`` the payload or 0): the tuple bound for
``j + q·2^{b+1}``, as every entry of a machine is bound for a different destination.

- **Round 0.** Machine i receives (DEST, SLOT) of machine ``i − 1 (mod n)`` and computes
  for both tuples ``w = ReLU(clamp(d, 0, n−1) − i + 3n·valid − n)`` with
  ``valid = [d ≥ 0] + [d ≤ n−1] − 1`` (margins 0.5 on an integer d): ``w = d − i + 2n ∈
  [n+1, 3n−1]`` for a destination among the machines, 0 otherwise (it sends nothing).
  ``E_0[q]`` is bound for ``(i + 2q) mod n``: its own tuple where ``w ∈ {2n + 2q,
  n + 2q}`` (offset 2q, kept), the received one where ``w`` is one of those (its offset
  from ``i − 1`` is ``2q + 1``, moved +1) and ``2q + 1 < n``: ``x = Σ [w = t]·x_src``, an
  ``exclusive`` sum of at most four selections (distinct destinations: at most one
  holds; the interpreter checks it), ``v = ReLU(Σ [w = t])``.
- **Round b ≥ 1.** Machine i receives the odd entries of machine ``i − 2^b (mod n)``:
  ``E_b[q] = E_{b−1}[2q] + E_{b−1}[2q+1] of i − 2^b`` (both fields; the second term
  where ``2q + 1 < ⌈n/2^b⌉``). Linear: no MLP, no comparison.
- **Result** (the last round, with the original round's receives and statements):
  ``target = x + default·(1 − v)`` of ``E_{k−1}[0]`` (exact: v ∈ {0, 1} and x = 0
  where v = 0).

The slots made here are marked ``Slot.made``: a payload gets the interval of the values
sent (``Slot.carries``) and a flag [−1, 1], which the construction proves (each entry is
bound for one destination, which one machine sends to at most).

**What it needs.** Destinations that are integers; a machine among 0..n−1 named by at
most as many machines as the send has targets (its *capacity* c: one for
``got = send x to d``, distinct destinations; where more send to one machine, their
tuples add): the compiled model's guarantee states it and the runtimes check it on
input destinations (:func:`~crasp_compiler.languages.pcoc.compile.compile_program`).

**Capacity c > 1** (``a, b = send x to d``: the general MPC round of Lemma B.1, with
every ``send`` of a round one word a machine sends): an entry holds a *list* of up to
``min(c, 2^{b+1})`` tuples ``(v, x, s)`` for its destination, valid ones first, in
increasing offset (:meth:`_Sender.list_rounds`). Round b puts the machine's own list
(bit b of the offset 0) before the received one (bit b 1), a selection by the own list's
valid flags (big-M gates); ``s = u − d`` (u the sender) is read off round 0's exact
equality tests, and the last round sorts the c tuples by it (odd–even transposition), so
that the k-th target holds the k-th lowest-numbered sender's value. Measured
(``examples/pcoc_sends/pairs.pcoc``, two sends of capacity 2): width about 22n, about
525 nonzero weights per machine, at most ``2⌈log₂ n⌉ + 7`` layers (each routing round an
attention layer and an MLP layer: a gate needs its 0/1 test as an input), float64 and
float32 covered; ``tests/languages/test_mpc_sends.py``.

**Size** (hard mode, k = ⌈log₂ n⌉). ``k + 3`` layers for permute.pcoc (round 0 is four
MLP sublayers: the range tests and clamps; w; the 4n equality tests; the selections,
every later round one attention layer without an MLP); residual width ``4n + 4`` (the
n + 1 position features, 2⌈n/2⌉ entry fields, the equality tests for one sublayer, the
routed fields, dead dimensions reused); about 70 nonzero weights per machine; compile
work O(n log n): n = 128: 10 layers, width 516, 8.4k nonzeros; n = 1,024: 13 layers,
width 4,100, 73k nonzeros, 1.5 CPU-s (``tests/languages/test_benes.py`` guards these).
Against Lemma B.1 / Theorem 5.1 (Beneš, 2k − 1 communication rounds, memory 2s with s
padded to 2^{k−1} copies of every tuple, about n(2 + k) + n + 1 numbers a machine): k
rounds, and at most n + 2 numbers a machine sends or holds in a round. The trade-off:
the equality tests take 2n residual dimensions for one sublayer and one layer, because
a big-M gate needs its 0/1 test as an input; a test folded into its gate (a tent of
``x + M(w − t)``, 3 units a pair) would save both, not done. Depth is not traded for
width: no round needs more than one layer but round 0.

**Floats.** The only comparisons with data are those of the destination (the range
tests, and the tests of w, an exact integer when d is one below 2^52): the float
guarantee of a send depends on how exactly the destination is compared with the machine
numbers, and :func:`destination_probe` lowers just that (the rounds before the send and
round 0's tests of both tuples), so that a destination bound the float type cannot route
is refused in moments. A payload passes one big-M gate (its rounding) and then additions
of one payload and exact zeros; the analysis bounds each addition by the sum of both
terms' errors, so the stated float64 bound grows with n (2·10⁻³ at n = 1,024 for
``|x| ≤ 10⁹``) where the rounding is that of one gate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from crasp_compiler.languages.pcoc.nodes import (
    Add,
    Assign,
    Call,
    Compare,
    Expr,
    For,
    IfExpr,
    Num,
    Program,
    Read,
    Receive,
    Round,
    SBin,
    Scale,
    SCall,
    Send,
    Slot,
    SNot,
    SNum,
    Static,
    StaticExpr,
    Stmt,
    Sub,
    SVar,
)
from crasp_compiler.languages.pcoc.static import unroll

PREFIX = "_bn"
MACHINE = SVar("i")


def has_sends(program: Program) -> bool:
    """Whether any round of ``program`` has a ``send``."""

    def walk(items: tuple[Round | For, ...]) -> bool:
        for item in items:
            if isinstance(item, Round):
                if item.sends:
                    return True
            elif walk(item.body):
                return True
        return False

    return walk(program.rounds)


def routing_rounds(n: int) -> int:
    """The rounds that replace one round with sends: ``⌈log₂ n⌉`` (1 for n = 1)."""
    return max((n - 1).bit_length(), 1)


# ================================================================== substitution


def _sub_static(expr: StaticExpr, env: dict[str, int]) -> StaticExpr:
    match expr:
        case SVar(name) if name in env:
            return SNum(env[name])
        case SBin(op, left, right):
            return SBin(op, _sub_static(left, env), _sub_static(right, env))
        case SNot(arg):
            return SNot(_sub_static(arg, env))
        case SCall(fn, args):
            return SCall(fn, tuple(_sub_static(a, env) for a in args))
    return expr


def _sub_expr(expr: Expr, env: dict[str, int]) -> Expr:
    match expr:
        case Static(inner):
            return Static(_sub_static(inner, env))
        case Add(left, right):  # keeps `exclusive`; no span, as the other rebuilt nodes
            return replace(expr, left=_sub_expr(left, env), right=_sub_expr(right, env), span=None)
        case Sub(left, right):
            return Sub(_sub_expr(left, env), _sub_expr(right, env))
        case Scale(factor, arg):
            return Scale(factor, _sub_expr(arg, env))
        case Call(fn, args):
            return Call(fn, tuple(_sub_expr(a, env) for a in args))
        case Compare(op, left, right, margin):
            return Compare(op, _sub_expr(left, env), _sub_expr(right, env), margin)
        case IfExpr(cond, then, otherwise):
            return IfExpr(_sub_cond(cond, env), _sub_expr(then, env), _sub_expr(otherwise, env))
    return expr


def _sub_cond(cond: Compare | StaticExpr, env: dict[str, int]) -> Compare | StaticExpr:
    if isinstance(cond, Compare):
        return Compare(cond.op, _sub_expr(cond.left, env), _sub_expr(cond.right, env), cond.margin)
    return _sub_static(cond, env)


def _sub_stmts(body: tuple[Stmt, ...], env: dict[str, int]) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    for stmt in body:
        if isinstance(stmt, Assign):
            out.append(replace(stmt, expr=_sub_expr(stmt.expr, env)))
        else:
            out.append(
                replace(
                    stmt,
                    cond=_sub_cond(stmt.cond, env),
                    then=_sub_stmts(stmt.then, env),
                    otherwise=_sub_stmts(stmt.otherwise, env),
                )
            )
    return tuple(out)


def _sub_round(rnd: Round, env: dict[str, int]) -> Round:
    env = {k: v for k, v in env.items() if k != "i"}
    receives = tuple(replace(r, source=_sub_static(r.source, env)) for r in rnd.receives)
    return replace(rnd, receives=receives, body=_sub_stmts(rnd.body, env))


# ================================================================== helpers


def _machine(offset: int, n: int) -> StaticExpr:
    """``(i + offset) mod n`` for ``0 ≤ offset < n``: a machine number."""
    return SBin("%", SBin("+", MACHINE, SNum(offset)), SNum(n)) if offset else MACHINE


def _sum(terms: list[Expr], exclusive: bool = False) -> Expr:
    """``((t₁ + t₂) + t₃) + …``; ``exclusive``: at most one of the terms' selections is
    taken (:class:`~crasp_compiler.languages.pcoc.nodes.Add`)."""
    if not terms:
        return Num(0.0)
    out = terms[0]
    for term in terms[1:]:
        out = Add(out, term)
    return replace(out, exclusive=True) if exclusive and isinstance(out, Add) else out


_Tuple = tuple[Expr, Expr]  # (destination, payload)


def _entries(n: int, b: int) -> int:
    """How many offsets a machine holds after round b: ``⌈n / 2^{b+1}⌉``."""
    return -(-n // (1 << (b + 1)))


# ================================================================== the pass


class _Sender:
    """The rounds of one send: receives and local statements per routing round."""

    def __init__(self, send: Send, n: int, tag: str, payload_bound: float | None) -> None:
        self.send = send
        self.n = n
        self.k = (n - 1).bit_length()
        self.tag = tag
        self.slots: dict[str, Slot] = {}
        self.payload_bound = payload_bound
        self.count = 0

    # ------------------------------------------------------------ names

    def temp(self, stem: str) -> str:
        self.count += 1
        return f"{self.tag}t{self.count}_{stem}"

    def slot(self, b: int, q: int, field: str, t: int | None = None) -> str:
        """The slot of field ``v`` (valid flag), ``x`` (payload) or ``s`` (sender) of
        offset ``q·2^{b+1}`` after round b (of its t-th tuple, with a capacity)."""
        name = f"{self.tag}e{b}_{q}_{'' if t is None else t}{field}"
        if name not in self.slots:
            if field == "x":  # a payload: one of the values sent, or 0
                slot = Slot(name, self.payload_bound, made=True, carries=self.send.slot)
            elif field == "s":  # a sort key u − d in −(n−1)..n−1, or 0
                slot = Slot(name, float(max(self.n - 1, 1)), made=True)
            else:  # a valid flag: 0 or 1
                slot = Slot(name, 1.0, made=True)
            self.slots[name] = slot
        return name

    def let(self, stem: str, expr: Expr, body: list[Stmt]) -> Expr:
        name = self.temp(stem)
        body.append(Assign(name, expr))
        return Read(name)

    # ------------------------------------------------------------ round 0

    def offset(self, d: Expr, body: list[Stmt]) -> Expr:
        """``w = ReLU(clamp(d, 0, n−1) − i + 3n·valid − n)``: ``d − i + 2n`` ∈ [n+1, 3n−1]
        where ``valid = [d ≥ 0] + [d ≤ n−1] − 1`` is 1, and 0 where it is 0 (a destination
        outside the machines). One variable: the equality tests read it alone."""
        n = self.n
        valid = Sub(
            Add(Compare(">=", d, Num(0.0), 0.5), Compare("<=", d, Num(float(n - 1)), 0.5)),
            Num(1.0),
        )
        clamped = Call("clamp", (d, Num(0.0), Num(float(n - 1))))
        w = Add(Sub(clamped, Static(MACHINE)), Sub(Scale(3.0 * n, valid), Num(float(n))))
        return self.let("w", Call("relu", (w,)), body)

    def targets(self, q: int) -> list[float]:
        """The values of ``w`` of a tuple destined to ``(i + 2q) mod n``: ``2n + 2q``
        (``d = i + 2q``) and, for q ≥ 1, ``n + 2q`` (``d = i + 2q − n``)."""
        n = self.n
        return [float(2 * n + 2 * q)] + ([float(n + 2 * q)] if q else [])

    def tuples(self, receives: list[Receive]) -> tuple[_Tuple, _Tuple | None]:
        """The machine's own (destination, payload) and, for n > 1, those of machine
        ``i − 1 (mod n)``, received (round 0 reads the send's slots directly)."""
        send, n = self.send, self.n
        own = (Read(send.dest), Read(send.slot))
        if n == 1:
            return own, None
        d, x = self.temp("rd"), self.temp("rx")
        source = _machine(n - 1, n)
        receives += [Receive(d, send.dest, source, -1.0), Receive(x, send.slot, source, 0.0)]
        return own, (Read(d), Read(x))

    def probe(self, receives: list[Receive], body: list[Stmt]) -> None:
        """Every kind of comparison round 0 makes with data (:meth:`offset` of both
        tuples, and their equality tests with the smallest and the largest target)."""
        own, other = self.tuples(receives)
        for d, _ in [own] if other is None else [own, other]:
            w = self.offset(d, body)
            last = _entries(self.n, 0) - 1
            for target in {min(self.targets(min(last, 1))), max(self.targets(last))}:
                body.append(Assign(self.temp("hit"), Compare("==", w, Num(target), 0.5)))

    def scatter(self, own: _Tuple, other: _Tuple | None, body: list[Stmt]) -> list[dict[str, Expr]]:
        """Round 0's local computation: offset ``2q`` of the machine's array, for every
        ``q < ⌈n/2⌉``: its own tuple where its offset is 2q, the received tuple of
        machine ``i − 1`` where that one's offset is ``2q + 1`` (the same destination)."""
        tuples = [(self.offset(own[0], body), own[1])]
        if other is not None:
            tuples.append((self.offset(other[0], body), other[1]))
        entries = []
        for q in range(_entries(self.n, 0)):
            sources = tuples if 2 * q + 1 < self.n else tuples[:1]
            hits = [(Compare("==", w, Num(t), 0.5), x) for w, x in sources for t in self.targets(q)]
            # the destinations are distinct: one hit at most (the interpreter checks it)
            entries.append(
                {
                    "v": Call("relu", (_sum([hit for hit, _ in hits]),)),
                    "x": _sum([IfExpr(hit, x, Num(0.0)) for hit, x in hits], exclusive=True),
                }
            )
        return entries

    def store(self, b: int, entries: list[dict[str, Expr]], body: list[Stmt]) -> None:
        """The entries after round b into their slots (one tuple per entry)."""
        self.list_store(b, [[entry] for entry in entries], body, listed=False)

    # ------------------------------------------------------------ the rounds

    def rounds(self) -> list[tuple[list[Receive], list[Stmt]]]:
        """(receives, statements) per routing round; the last round's statements end
        with the assignment of the send's targets."""
        if self.send.capacity > 1:
            return self.list_rounds()
        send, n = self.send, self.n
        receives: list[Receive] = []
        body: list[Stmt] = []
        own, other = self.tuples(receives)
        entries = self.scatter(own, other, body)
        out = [(receives, body)]
        for b in range(1, max(self.k, 1)):
            self.store(b - 1, entries, body)
            receives, body = [], []
            source = _machine(n - 2**b, n)
            entries = []
            for q in range(_entries(n, b)):
                entry: dict[str, Expr] = {}
                for field in ("v", "x"):
                    kept: Expr = Read(self.slot(b - 1, 2 * q, field))
                    if 2 * q + 1 < _entries(n, b - 1):
                        got = self.temp("r" + field)
                        name = self.slot(b - 1, 2 * q + 1, field)
                        receives.append(Receive(got, name, source, 0.0))
                        kept = Add(kept, Read(got))
                    entry[field] = kept
                entries.append(entry)
            out.append((receives, body))
        # offset 0 after the last round: the tuple sent to the machine, or none (v = 0)
        (last,) = entries
        x, v = self.let("x", last["x"], body), self.let("v", last["v"], body)
        body.append(Assign(send.targets[0], _or_default(x, v, send.default)))
        return out

    # ------------------------------------------------------------ capacity c > 1

    def list_rounds(self) -> list[tuple[list[Receive], list[Stmt]]]:
        """:meth:`rounds` for a receiver capacity c > 1: an entry is a list of up to
        ``min(c, 2^{b+1})`` tuples (v, x, s) bound for one destination d, packed (valid
        ones first), in increasing offset; ``s = u − d`` for the sender u (a sort key,
        read off round 0's equality tests), 0 where not valid. Round b puts the machine's
        own list (offsets with bit b 0) before the received one (bit b 1): ``M[t] = A[t]`` where
        ``A.v[t]``, else ``B[t − k]`` for the k valid tuples of A (packed: the largest k
        with ``A.v[k−1]``). The last round sorts the c tuples by sender (odd–even
        transposition on valid neighbours) and assigns ``t_k = x_k + default·(1 − v_k)``."""
        send, n = self.send, self.n
        receives: list[Receive] = []
        body: list[Stmt] = []
        own, other = self.tuples(receives)
        entries = self.list_scatter(own, other, body)
        out = [(receives, body)]
        for b in range(1, max(self.k, 1)):
            self.list_store(b - 1, entries, body)
            receives, body = [], []
            source = _machine(n - 2**b, n)
            merged: list[list[dict[str, Expr]]] = []
            for q in range(_entries(n, b)):
                mine: list[dict[str, Expr]] = [
                    {f: Read(self.slot(b - 1, 2 * q, f, t)) for f in "vxs"}
                    for t in range(len(entries[2 * q]))
                ]
                got: list[dict[str, Expr]] = []
                if 2 * q + 1 < _entries(n, b - 1):
                    for t in range(len(entries[2 * q + 1])):
                        tuple_: dict[str, Expr] = {}
                        for f in "vxs":
                            name = self.temp("r" + f)
                            receives.append(
                                Receive(name, self.slot(b - 1, 2 * q + 1, f, t), source, 0.0)
                            )
                            tuple_[f] = Read(name)
                        got.append(tuple_)
                merged.append(self.merge(mine, got))
            entries = merged
            out.append((receives, body))
        (last,) = entries
        last = [{f: self.let(f, e, body) for f, e in tuple_.items()} for tuple_ in last]
        ordered = self.by_sender(last, body)
        for t, target in enumerate(send.targets):
            if t >= len(ordered):  # fewer machines than the capacity: never filled
                body.append(Assign(target, Num(float(send.default))))
                continue
            body.append(Assign(target, _or_default(ordered[t]["x"], ordered[t]["v"], send.default)))
        return out

    def list_scatter(
        self, own: _Tuple, other: _Tuple | None, body: list[Stmt]
    ) -> list[list[dict[str, Expr]]]:
        """Round 0 with a capacity: entry q lists the machine's own tuple where its offset
        is 2q, then machine ``i − 1``'s where its offset is 2q + 1. The sort key
        ``s = u − d`` of a tuple is a sum of its exact 0/1 equality tests, each times the
        key its target implies: own tuple (u = i), ``w = 2n + 2q`` → ``−2q``,
        ``w = n + 2q`` → ``n − 2q``; machine i − 1's → one less (``n − 1 − 2q`` for
        ``w = 2n + 2q`` on machine 0, whose left neighbour is n − 1)."""
        n = self.n
        sources = [(self.offset(own[0], body), own[1], 0)]
        if other is not None:
            sources.append((self.offset(other[0], body), other[1], 1))
        entries = []
        for q in range(_entries(n, 0)):
            singles = []
            for w, x, behind in sources[: 2 if 2 * q + 1 < n else 1]:
                hits: list[Expr] = []
                keys: list[Expr] = []
                for t in self.targets(q):
                    hit = self.let("hit", Compare("==", w, Num(t), 0.5), body)
                    key = (-2.0 * q if t >= 2 * n else n - 2.0 * q) - behind
                    hits.append(hit)
                    if behind and t >= 2 * n:  # machine 0 hears machine n − 1
                        keys.append(
                            IfExpr(
                                SBin("==", MACHINE, SNum(0)),
                                Scale(key + n, hit),
                                Scale(key, hit),
                            )
                        )
                    else:
                        keys.append(Scale(key, hit))
                valid = self.let("valid", _sum(hits), body)
                singles.append({"v": valid, "x": _gate(valid, x), "s": _sum(keys)})
            entries.append(self.merge(singles[:1], singles[1:]))
        return entries

    def merge(
        self, mine: list[dict[str, Expr]], got: list[dict[str, Expr]]
    ) -> list[dict[str, Expr]]:
        """The packed list ``mine`` then the packed list ``got``, cut at the capacity."""
        size = min(self.send.capacity, len(mine) + len(got))
        merged = []
        for t in range(size):
            entry: dict[str, Expr] = {}
            for f in "vxs":
                expr: Expr = got[t][f] if t < len(got) else Num(0.0)
                for k in range(1, min(t, len(mine)) + 1):  # k valid tuples in mine
                    taken = got[t - k][f] if t - k < len(got) else Num(0.0)
                    expr = IfExpr(_valid(mine[k - 1]["v"]), taken, expr)
                if t < len(mine):
                    expr = IfExpr(_valid(mine[t]["v"]), mine[t][f], expr)
                entry[f] = expr
            merged.append(entry)
        return merged

    def list_store(
        self,
        b: int,
        entries: list[list[dict[str, Expr]]],
        body: list[Stmt],
        listed: bool = True,
    ) -> None:
        """The lists of tuples after round b into their slots (all computed first, then
        stored: the slots are read while the new values are computed)."""
        values = [
            [{f: self.let("new", e, body) for f, e in tuple_.items()} for tuple_ in entry]
            for entry in entries
        ]
        for q, entry in enumerate(values):
            for t, tuple_ in enumerate(entry):
                for f, expr in tuple_.items():
                    body.append(Assign(self.slot(b, q, f, t if listed else None), expr))

    def by_sender(self, tuples: list[dict[str, Expr]], body: list[Stmt]) -> list[dict[str, Expr]]:
        """The packed list sorted by sender: odd–even transposition on the keys
        ``s = u − d`` (u the sender, d this machine: increasing in u), a pair swapped where
        both are valid and ``s_a > s_{a+1}`` (``s_a − s_{a+1} − 2n·(1 − v_{a+1}) ≥ 1/2``:
        distinct integers, and negative where ``a + 1`` is empty)."""
        n = self.n
        tuples = list(tuples)
        for stage in range(len(tuples)):
            for a in range(stage % 2, len(tuples) - 1, 2):
                lo, hi = tuples[a], tuples[a + 1]
                gap = Sub(Sub(lo["s"], hi["s"]), Scale(2.0 * n, Sub(Num(1.0), hi["v"])))
                swap = self.let("swap", Compare(">=", gap, Num(0.5), 0.5), body)
                cond = _valid(swap)
                tuples[a] = {
                    f: self.let(f, IfExpr(cond, hi[f], lo[f]), body) if f != "v" else lo[f]
                    for f in "vxs"
                }
                tuples[a + 1] = {
                    f: self.let(f, IfExpr(cond, lo[f], hi[f]), body) if f != "v" else hi[f]
                    for f in "vxs"
                }
        return tuples


def _or_default(x: Expr, v: Expr, default: float) -> Expr:
    """``x + default·(1 − v)``: the payload, or the default where no tuple arrived (x = 0
    and v = 0 there; exact, v being 0 or 1)."""
    return x if not default else Add(x, Scale(float(default), Sub(Num(1.0), v)))


def _valid(flag: Expr) -> Compare:
    """``flag ≥ 1/2`` for a 0/1 flag."""
    return Compare(">=", flag, Num(0.5), 0.5)


def _gate(flag: Expr, value: Expr) -> Expr:
    """``value`` where the 0/1 ``flag`` is 1, else 0."""
    return IfExpr(_valid(flag), value, Num(0.0))


@dataclass(frozen=True)
class Probe:
    """The rounds of a program before its first send round, then that round's first
    routing step on the destinations (:func:`destination_probe`)."""

    program: Program
    before: Program
    send: Send

    def with_bound(self, bound: float) -> Program:
        """The probe with the destination slot's bound replaced."""
        slots = tuple(
            replace(slot, bound=bound) if slot.name == self.send.dest else slot
            for slot in self.program.slots
        )
        return replace(self.program, slots=slots)


def destination_probe(program: Program, n: int) -> Probe | None:
    """What the routing of the first send round compares with data, cheaply: the rounds
    before it, then one round computing, for each of its sends, the destination tuples of
    the machine's own destination and of its first partner's (:meth:`_Sender.raw_tuple`:
    every threshold the routing compares a destination with). Every later comparison of
    the routing is between exact integers. None without sends."""
    rounds: list[Round] = []
    for number, (rnd, env) in enumerate(unroll(program, n)):
        base = _sub_round(rnd, {key: value for key, value in env.items() if key != "n"})
        if not rnd.sends:
            rounds.append(replace(base, sends=()))
            continue
        receives: list[Receive] = []
        body: list[Stmt] = []
        slots = list(program.slots)
        for q, send in enumerate(rnd.sends):
            sender = _Sender(send, n, f"{PREFIX}{number}_{q}_probe_", None)
            sender.probe(receives, body)
            slots.extend(sender.slots.values())
        rounds.append(Round(tuple(receives), tuple(body), span=rnd.span))
        probe = _rebuilt(program, slots, rounds)
        return Probe(probe, replace(probe, rounds=tuple(rounds[:-1])), rnd.sends[0])
    return None


def lower_sends(program: Program, n: int) -> Program:
    """``program`` for exactly ``n`` machines with every send round replaced by
    :func:`routing_rounds` fixed-pattern rounds (unrolled); unchanged without sends."""
    if not has_sends(program):
        return program
    rounds: list[Round] = []
    slots = list(program.slots)
    for number, (rnd, env) in enumerate(unroll(program, n)):
        env = {key: value for key, value in env.items() if key != "n"}
        base = _sub_round(rnd, env)
        if not rnd.sends:
            rounds.append(replace(base, sends=()))
            continue
        steps: list[tuple[list[Receive], list[Stmt]]] | None = None
        for q, send in enumerate(rnd.sends):
            bound = program.slot(send.slot).bound
            sender = _Sender(send, n, f"{PREFIX}{number}_{q}_", bound)
            mine = sender.rounds()
            slots.extend(sender.slots.values())
            if steps is None:
                steps = mine
            else:
                for (rec, body), (rec2, body2) in zip(steps, mine, strict=True):
                    rec.extend(rec2)
                    body.extend(body2)
        assert steps is not None
        for index, (receives, body) in enumerate(steps):
            if index == len(steps) - 1:
                receives = [*receives, *base.receives]
                body = [*body, *base.body]
            rounds.append(Round(tuple(receives), tuple(body), span=rnd.span))
    return _rebuilt(program, slots, rounds)


def _rebuilt(program: Program, slots: list[Slot], rounds: list[Round]) -> Program:
    """``program`` with these slots and (unrolled) rounds, its inputs, outputs and source."""
    return Program(
        tuple(slots),
        program.inputs,
        program.outputs,
        tuple(rounds),
        source=program.source,
        filename=program.filename,
    )
