"""Lower data-dependent ``send`` statements to fixed-pattern PCOC rounds (Beneš routing).

:func:`lower_sends` (``Program``, n → ``Program``) replaces every round with sends by
``2k − 1`` rounds, ``k = ⌈log₂ n⌉``, whose receives all have static sources (the
data-agnostic Beneš routing of the positional-attention digest, §3.5), plus local
computation; the output uses only the existing constructs, so the interpreter runs it
and the compiler compiles it. The lowered program is for exactly ``n`` machines: it is
unrolled (loop variables and ``r`` of the original rounds become numbers).

The construction, for ``p = 2^k`` virtual machines and memory ``s = 2^{k−1}`` tuples:

- **Tuples.** Machine i sends one tuple ``(valid, bit_0..bit_{k−1} of DEST_i, SLOT_i)``,
  padded to ``s`` identical copies (every message a multiple of ``2^{k−1}`` tuples, as
  the halving argument needs); ``valid = [0 ≤ DEST_i ≤ n − 1]`` (integer DEST, margins
  0.5). The destination bits are computed once, ``bit_b(d) = Σ_t (−1)^{t+1}[d ≥ t·2^b]``.
- **Dummies.** Virtual machines ``v ≥ n`` send nothing; virtual ``v`` lives on machine
  ``v`` (lane A) if ``v < n``, else on machine ``v − s`` (lane B, on the machines
  ``n − s ≤ i < s``). Lane B exists only when n is not a power of two.
- **Fragmentation**, steps ``L = 1..k−1`` (mask ``2^{k−L}``): keep the even logical slots,
  receive the partner's odd logical slots at the same positions. With one message per
  machine every slot's source is known statically (it is ``i XOR`` a constant), so the
  "sort by destination" of the digest is a static relabelling (the logical order groups
  the copies of each source contiguously): no data-dependent sort is needed. Fact 1 holds
  by construction (s slots).
- **Collection**, steps ``b = 0..k−1`` (mask ``2^b``, LSB first), width ``2s``: the local
  computation before the send writes the tuples whose destination bit b equals the
  machine's into slots ``0..s−1`` ("stay") and the others into ``s..2s−1`` ("go"),
  compacted by rank (ranks are sums of 0/1 flags; slot j takes the tuple whose key
  ``rank + 2s·(1 − flag)`` equals j, a comparison with margin 0.5 on integers; each
  key is made one variable by a ReLU unit first, one MLP layer that keeps the 4s²
  comparisons from each reading an O(s)-term sum); the
  round then keeps its own first half and receives the partner's second half. Fact 2
  (loads ≤ s) means no tuple is ever dropped; the tests check the total count.
- **Recombination** (fused into the last collection round): every copy carries the same
  payload, so the result is the payload of the first valid copy, or the default.
- **What it needs.** Destinations that are integers, distinct among the machines
  0..n−1 they name (where two machines send to one, a value is lost): the
  compiled model's guarantee states it and the runtimes check it on input destinations
  (:func:`~crasp_compiler.languages.pcoc.compile.compile_pcoc`). The slots made here are
  marked ``Slot.made``: the lowering gives a payload the interval of the values sent
  (``Slot.carries``) and a flag or bit [−1, 1], which the construction proves (every
  compacted slot takes at most one tuple), where summing the gated tuples would not.

**Size** (p = 2^k machines, s = 2^{k−1}, hard mode). A collection step's compactions
test ``key_z = j`` for the pairs j ≤ z < 2s, j < s, stay and go: 3s² + s equality tests,
each two Heaviside units writing one residual dimension, lowered once though every field
reads it; the next MLP gates every field of every tuple by them (2 units a gate, O(s²k)
hidden units) and writes one dimension per slot and field, the slot's valid flag included
(a ReLU of its sum, so no test outlives that MLP). So the residual holds about 3s² test
dimensions for one sublayer plus O(s·k) tuple fields, and a send round of permute.pcoc
takes 5k + 2 layers for its 2k − 1 rounds (2.5 a round plus a constant: at most 3 a round
from n = 32 on): 17 / 22 / 27 / 32 layers for n = 8 / 16 / 32 / 64, width
106 / 334 / 1 110 / 3 878 (``tests/languages/test_benes.py`` holds these). The
trade-off: a test that lived only in hidden units would need its payload gated in the
same MLP, and a real payload cannot be gated exactly by a test computed beside it (an
exact 0 off the slot needs the test as an input), so the tests take residual
dimensions for one sublayer rather than the model taking a layer more per round.

**Floats.** Every comparison the routing makes, except those of the destination itself
(the bits and the valid flag), is of exact integers: flags, ranks, keys and bits are sums
of exact 0/1 decisions, so the rounding analysis
(:mod:`crasp_compiler.languages.pcoc.rounding`) proves them exact at any n, and the
float guarantee of a send depends only on how exactly the destination is compared with the
machine numbers. :func:`destination_probe` lowers just that (the rounds before the send
and its first routing step), so that a destination bound the float type cannot route is
refused in moments rather than after the whole lowering. A compaction slot's sum of
selections is marked ``exclusive`` (:class:`~crasp_compiler.languages.pcoc.nodes.Add`):
the keys of flagged tuples are distinct ranks, so at most one selection is taken; the
interpreter checks it with its promises, and the analysis counts one selected payload.

The first routing round reads the original DEST and SLOT directly (the tuple layout is
computed after the receive), and the original round's receives and statements run in the
last routing round (the routing rounds write only their own slots), so a send round
costs ``2k − 1`` rounds (1 for n = 2, 0 extra for n = 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from crasp_compiler.languages.pcoc.nodes import (
    STATIC_TYPES,
    Add,
    Assign,
    Call,
    Compare,
    Expr,
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

    def walk(items) -> bool:
        for item in items:
            if isinstance(item, Round):
                if item.sends:
                    return True
            elif walk(item.body):
                return True
        return False

    return walk(program.rounds)


def routing_rounds(n: int) -> int:
    """The rounds that replace one round with sends: ``2⌈log₂ n⌉ − 1`` (1 for n = 1)."""
    k = (n - 1).bit_length()
    return max(2 * k - 1, 1)


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
        case Add(left, right):
            return replace(expr, left=_sub_expr(left, env), right=_sub_expr(right, env))
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


def _sub_cond(cond, env):
    return _sub_static(cond, env) if isinstance(cond, STATIC_TYPES) else _sub_expr(cond, env)


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


# ================================================================== static helpers


def _s(value: int) -> StaticExpr:
    return SNum(value)


def _add(a: StaticExpr, b: StaticExpr) -> StaticExpr:
    return SBin("+", a, b)


def _bit(x: StaticExpr, b: int) -> StaticExpr:
    """Bit b of a non-negative static integer."""
    return SBin("%", SBin("//", x, _s(2**b)), _s(2))


def _xor(x: StaticExpr, b: int) -> StaticExpr:
    """``x XOR 2^b``."""
    m = 2**b
    return SBin("-", _add(x, _s(m)), SBin("*", _s(2 * m), _bit(x, b)))


def _select(cond: StaticExpr, value: StaticExpr) -> StaticExpr:
    """``value`` where cond holds, else −1 (a source outside the machines)."""
    return SBin("-", SBin("*", cond, _add(value, _s(1))), _s(1))


def _sum(terms: list[Expr], exclusive: bool = False) -> Expr:
    """``((t₁ + t₂) + t₃) + …``; ``exclusive``: at most one of the terms' selections is
    taken (:class:`~crasp_compiler.languages.pcoc.nodes.Add`)."""
    if not terms:
        return Num(0.0)
    out = terms[0]
    for term in terms[1:]:
        out = Add(out, term)
    return replace(out, exclusive=True) if exclusive and isinstance(out, Add) else out


# ================================================================== the pass


class _Sender:
    """The rounds of one send: receives, local statements and slots, per routing step."""

    def __init__(self, send, n: int, tag: str, payload_bound: float | None) -> None:
        self.send = send
        self.n = n
        self.k = (n - 1).bit_length()
        self.p = 2**self.k
        self.s = self.p // 2
        self.tag = tag
        self.lanes = ["A"] + (["B"] if n != self.p else [])
        self.slots: dict[str, Slot] = {}
        self.payload_bound = payload_bound
        self.count = 0

    # ------------------------------------------------------------ names

    def temp(self, stem: str) -> str:
        self.count += 1
        return f"{self.tag}t{self.count}_{stem}"

    def slot(self, lane: str, z: int, field: str) -> str:
        name = f"{self.tag}{lane}{z}_{field}"
        if name not in self.slots:
            if field == "x":  # a payload: one of the values sent, or 0
                slot = Slot(name, self.payload_bound, made=True, carries=self.send.slot)
            else:  # a valid flag or a destination bit: 0 or 1
                slot = Slot(name, 1.0, made=True)
            self.slots[name] = slot
        return name

    def virtual(self, lane: str) -> StaticExpr:
        return MACHINE if lane == "A" else _add(MACHINE, _s(self.s))

    def host_b(self) -> StaticExpr:
        return SBin("and", SBin(">=", MACHINE, _s(self.n - self.s)), SBin("<", MACHINE, _s(self.s)))

    # ------------------------------------------------------------ receiving

    def receive(self, lane: str, partner: StaticExpr, names: dict[str, str], out: list):
        """Receive every field (slot names per field, of the lane holding virtual
        ``partner``): returns field -> Expr."""
        fields: dict[str, Expr] = {}
        gate = self.host_b() if lane == "B" else None
        src_a = _select(SBin("<", partner, _s(self.n)), partner)
        if gate is not None:
            src_a = _select(gate, src_a)
        src_b = None
        if "B" in self.lanes:
            src_b = _select(SBin(">=", partner, _s(self.n)), SBin("-", partner, _s(self.s)))
            if gate is not None:
                src_b = _select(gate, src_b)
        for field, (name_a, name_b) in names.items():
            t_a = self.temp("ra")
            out.append(Receive(t_a, name_a, src_a, 0.0))
            value: Expr = Read(t_a)
            if src_b is not None:
                t_b = self.temp("rb")
                out.append(Receive(t_b, name_b, src_b, 0.0))
                value = Add(value, Read(t_b))
            fields[field] = value
        return fields

    def receive_raw(self, lane: str, partner: StaticExpr, out: list) -> tuple[Expr, Expr]:
        """DEST and SLOT of the real machine ``partner`` (dummies send nothing)."""
        src = _select(SBin("<", partner, _s(self.n)), partner)
        if lane == "B":
            src = _select(self.host_b(), src)
        t_d, t_x = self.temp("rd"), self.temp("rx")
        out.append(Receive(t_d, self.send.dest, src, -1.0))
        out.append(Receive(t_x, self.send.slot, src, 0.0))
        return Read(t_d), Read(t_x)

    # ------------------------------------------------------------ local computation

    def let(self, stem: str, expr: Expr, body: list) -> Expr:
        if isinstance(expr, Read | Num):
            return expr
        name = self.temp(stem)
        body.append(Assign(name, expr))
        return Read(name)

    def raw_tuple(self, d: Expr, x: Expr, body: list) -> dict[str, Expr]:
        valid = Call(
            "min",
            (Compare(">=", d, Num(0.0), 0.5), Compare("<=", d, Num(float(self.n - 1)), 0.5)),
        )
        fields = {"v": self.let("v", valid, body), "x": x}
        for b in range(self.k):
            terms: list[Expr] = []
            for t in range(1, (self.p - 1) // 2**b + 1):
                step = Compare(">=", d, Num(float(t * 2**b)), 0.5)
                terms.append(step if t % 2 else Scale(-1.0, step))
            fields[f"b{b}"] = self.let(f"bit{b}", _sum(terms), body)
        return fields

    def null_tuple(self) -> dict[str, Expr]:
        return {"v": Num(0.0), "x": Num(0.0), **{f"b{b}": Num(0.0) for b in range(self.k)}}

    def flag(self, lane: str, tup: dict[str, Expr], b: int, body: list) -> Expr:
        """1 when the tuple is valid and its destination bit b is the machine's."""
        mine = SBin("==", _bit(self.virtual(lane), b), _s(1))
        expr = IfExpr(
            mine,
            Call("min", (tup["v"], tup[f"b{b}"])),
            Call("min", (tup["v"], Sub(Num(1.0), tup[f"b{b}"]))),
        )
        return self.let("stay", expr, body)

    def compact(self, flags: list[Expr], tuples, width: int, fields, body) -> list[dict]:
        """The flagged tuples in rank order into ``width`` positions (Num(0) beyond)."""
        keys: list[Expr] = []
        rank: Expr = Num(0.0)
        for z, flag in enumerate(flags):
            key: Expr = Add(rank, Scale(2.0 * self.s, Sub(Num(1.0), flag)))
            if width > 1:  # read by `width` comparisons: one unit makes it one variable
                key = Call("relu", (key,))
            keys.append(self.let("key", key, body))
            if z + 1 < len(flags):
                rank = self.let("rank", Add(rank, flag), body)
        out = []
        for j in range(width):
            hits = [(z, Compare("==", keys[z], Num(float(j)), 0.5)) for z in range(j, len(flags))]
            # relu (of a sum ≥ 0) makes the flag one variable, written in the MLP of the
            # selections: the equality tests then die there instead of living on in it
            tup: dict[str, Expr] = {"v": Call("relu", (_sum([hit for _, hit in hits]),))}
            for field in fields:
                if field != "v":
                    # the keys of flagged tuples are their distinct ranks: one hit at most
                    tup[field] = _sum(
                        [IfExpr(hit, tuples[z][field], Num(0.0)) for z, hit in hits],
                        exclusive=True,
                    )
            out.append(tup)
        return out

    def layout(self, lane: str, tuples: list[dict], b: int, body: list) -> list[dict]:
        """Stay tuples into positions 0..s−1, go tuples into s..2s−1 (collection step b)."""
        fields = ["v", "x", *[f"b{c}" for c in range(b + 1, self.k)]]
        stay = [self.flag(lane, tup, b, body) for tup in tuples]
        go = [
            self.let("go", Sub(tup["v"], flag), body)
            for tup, flag in zip(tuples, stay, strict=True)
        ]
        return self.compact(stay, tuples, self.s, fields, body) + self.compact(
            go, tuples, self.s, fields, body
        )

    def store(self, lane: str, tuples: list[dict], body: list, keep: set[int] = frozenset()):
        # every value first (the expressions read the slots being replaced), then the slots
        values = [
            {f: e if z in keep else self.let("new", e, body) for f, e in tup.items()}
            for z, tup in enumerate(tuples)
        ]
        names = []
        for z, tup in enumerate(values):
            entry = {}
            for field, expr in tup.items():
                name = self.slot(lane, z, field)
                entry[field] = name
                if z not in keep and expr != Read(name):
                    body.append(Assign(name, expr))
            names.append(entry)
        return names

    # ------------------------------------------------------------ the rounds

    def rounds(self) -> list[tuple[list[Receive], list[Stmt]]]:
        """(receives, statements) per routing round; the last round's statements end
        with the assignment of the send's target."""
        send, k, s = self.send, self.k, self.s
        if k == 0:
            body: list[Stmt] = []
            tup = self.raw_tuple(Read(send.dest), Read(send.slot), body)
            body.append(Assign(send.target, self._result([tup], body)))
            return [([], body)]
        out = []
        state: dict[str, list[dict[str, str]]] = {}  # lane -> slot names per position
        order = list(range(s))  # logical -> physical (fragmentation)
        labels = [0] * s  # source offset (XOR) of each physical position
        # ---- fragmentation
        for step in range(1, k):
            e = k - step
            receives: list[Receive] = []
            body = []
            prev = dict(state)
            for lane in self.lanes:
                partner = _xor(self.virtual(lane), e)
                if step == 1:
                    if lane == "A":
                        own = self.raw_tuple(Read(send.dest), Read(send.slot), body)
                    else:
                        own = self.null_tuple()
                    d, x = self.receive_raw(lane, partner, receives)
                    other = self.raw_tuple(d, x, body)
                    tuples = [own] * s  # by physical position
                    for q in range(1, s, 2):
                        tuples[order[q]] = other
                else:
                    tuples = [{f: Read(name) for f, name in entry.items()} for entry in prev[lane]]
                    for q in range(1, s, 2):
                        z = order[q]
                        names = {
                            f: (prev["A"][z][f], prev["B"][z][f] if "B" in prev else "")
                            for f in prev[lane][z]
                        }
                        tuples[z] = self.receive(lane, partner, names, receives)
                if step == k - 1:
                    lay = self.layout(lane, tuples, 0, body)
                    state[lane] = self.store(lane, lay, body)
                else:
                    keep = set() if step == 1 else {order[q] for q in range(0, s, 2)}
                    state[lane] = self.store(lane, tuples, body, keep)
            new_labels = list(labels)
            for q in range(1, s, 2):
                new_labels[order[q]] = labels[order[q]] ^ 2**e
            labels = new_labels
            order = sorted(range(s), key=lambda z: (labels[z], order.index(z)))
            out.append((receives, body))
        # ---- collection
        for b in range(k):
            receives = []
            body = []
            prev = dict(state)
            last = b == k - 1
            for lane in self.lanes if not last else ["A"]:
                partner = _xor(self.virtual(lane), b)
                if k == 1:  # the first step: from the raw values
                    own = self.raw_tuple(Read(send.dest), Read(send.slot), body)
                    d, x = self.receive_raw(lane, partner, receives)
                    other = self.raw_tuple(d, x, body)
                    tuples = []
                    for tup in (own, other):
                        gated = dict(tup)
                        gated["v"] = self.flag(lane, tup, 0, body)
                        tuples.append(gated)
                else:
                    tuples = [
                        {f: Read(name) for f, name in entry.items()} for entry in prev[lane][:s]
                    ]
                    for z in range(s, 2 * s):
                        names = {
                            f: (prev["A"][z][f], prev["B"][z][f] if "B" in prev else "")
                            for f in prev[lane][z]
                        }
                        tuples.append(self.receive(lane, partner, names, receives))
                if last:
                    body.append(Assign(send.target, self._result(tuples, body)))
                else:
                    lay = self.layout(lane, tuples, b + 1, body)
                    state[lane] = self.store(lane, lay, body)
            out.append((receives, body))
        return out

    def _result(self, tuples: list[dict], body: list) -> Expr:
        """The payload of the first valid tuple, or the default."""
        flags = [tup["v"] for tup in tuples]
        (first,) = self.compact(flags, tuples, 1, ["v", "x"], body)
        count = self.let("count", _sum(flags), body)
        return IfExpr(Compare(">", count, Num(0.5), 0.5), first["x"], Num(float(self.send.default)))


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
            sender.raw_tuple(Read(send.dest), Read(send.slot), body)
            if sender.k:
                partner = _xor(sender.virtual("A"), max(sender.k - 1, 0))
                d, x = sender.receive_raw("A", partner, receives)
                sender.raw_tuple(d, x, body)
            slots.extend(sender.slots.values())
        rounds.append(Round(tuple(receives), tuple(body), rnd.span))
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
        steps: list[tuple[list, list]] | None = None
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
            rounds.append(Round(tuple(receives), tuple(body), rnd.span))
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
