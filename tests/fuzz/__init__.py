"""Seeded fuzz harness: no user input produces a traceback, a crash, a hang or a silent
disagreement (issue 13).

Run it from the repository root::

    nice -n 10 python -m tests.fuzz --families crasp,pcoc,inputs,models,grids \\
        --cases 500 --seed 0 --out fuzz-results.json [--time-limit 600]

    # replay one case in this process, with full tracebacks
    python -m tests.fuzz --repro crasp:0:123

``--cases`` is per family, or ``FAMILY=N,...`` (``--cases crasp=14000,pcoc=7500``).
Limits are CPU time, so a loaded machine does not turn slow cases into hangs:
``--case-cpu S`` (default 8) CPU seconds per case, counted by ITIMER_PROF in the worker
(a child process the case waits for gets what is left, by RLIMIT_CPU); past it a case is
interrupted. At 3x + 10 CPU-s the kernel kills the worker (RLIMIT_CPU: a loop in C that
never returns to Python). ``--case-wall W`` (default 20x the CPU limit) wall-clock seconds
catch a case that sleeps or deadlocks; the parent kills a worker 30 s after that.
``--memory-gib G`` (default 4) is the worker's address-space limit (so a huge allocation is
a MemoryError, not the OOM killer), ``--start I`` the first case index.

Families (one module each, ``tests/fuzz/<family>.py``, with ``fuzz_<family>``):

- ``crasp``  C-RASP program text: mutated examples, hostile templates (huge integers,
  10**9 nesting, deep nesting, long definition chains, windows, ``"<bos>"``, unicode
  operators) and random well-formed programs (``tests/support/strategies.py``). Valid programs
  are interpreted (and checked against the naive evaluator of ``tests/support/naive.py`` on short
  inputs), printed and re-parsed, compiled (heaviside; relu with a small ``max_len`` and
  layernorm on subsets) and run by the numpy executor (float64, float32) and, on a
  subset, the torch module; every output at every position must equal the interpreter's
  wherever ``model.guarantee.covers(length, dtype)``. Uncovered inputs must be refused
  (or agree).
- ``pcoc``   PCOC program text: mutated examples, hostile statics and random valid
  programs; ``interpret`` vs ``compile_program``/``run_pcoc`` (hard; softmax on a
  subset; torch on a subset) on inputs within the declared bounds (relative agreement
  1e-6, plus the bound the model records) and outside them (refusal, warning or agreement).
- ``inputs`` hostile input lines for ``crasp interpret`` / ``crasp run`` (CliRunner,
  argv or stdin bytes, a few as real subprocesses); ``interpret`` and ``run`` must print
  the same answers when both succeed.
- ``models`` mutated model files (byte flips, truncation, header JSON, array dtypes and
  shapes, CSR index arrays, extra/missing/non-npy members, compressed bombs) through
  ``crasp info``, ``crasp run`` and ``crasp check --samples 5 --max-len 8``.
- ``grids``  TOML grid files through ``load_grid`` and (a subset) ``crasp sweep`` with
  training replaced by a no-op.
- ``show``   small programs over hostile tokens (``<!--<script``, ``</script>``,
  ``$\\foo$``, ``$x^$``, ``&``, RTL, emoji, 5,000 characters), some with hostile labels
  (control characters, lone surrogates) edited into the model file, through ``crasp show``
  to HTML, PNG and SVG, into a folder, a missing folder or under a file: a picture written
  (of its kind; HTML: no raw ``<`` in the JSON data block) or a one-line error.
- ``records`` committed training records with fields deleted, renamed, retyped or nested
  deeply (or the whole record replaced) through ``crasp plot`` and the tables of
  ``benchmarks/length_generalization_report.py`` (reading a private copy of the records).
- ``lens``   TransformerLens exports with ``config.json`` mutated (each ``cfg`` field given
  other values and types, ``crasp`` fields, the whole file) through ``crasp info``,
  ``run`` (must print the unmutated export's answer) and ``check``.

Every case runs in a worker child process (one at a time) that is restarted when it dies:
a case that kills it by a signal is a ``crash``, one past its CPU or wall-clock limits a
``hang`` (crasp/pcoc past the CPU limit: ``slow``). A case is reproducible from (family,
seed, index) alone. Classes: ``ok``, ``refused`` (CraspError, click usage error, CLI exit
1/2 with a message), ``traceback`` (any other exception, or "Traceback" in CLI output),
``crash``, ``hang``, ``disagree`` (valid and covered, outputs differ), ``bad_output``
(exit 0 but a picture missing or malformed, or a refusal that leaves an empty file); notes
that do not fail the run: ``slow`` (crasp/pcoc case over the CPU limit), ``uncovered``
(PCOC input that breaks a promise of the program, e.g. a slot bound, and disagrees),
``accepted_invalid`` (a grid value of the wrong type accepted; a lens ``cfg`` field that
changes the TransformerLens model accepted by ``run`` or ``check``), ``unsafe`` (a grid run
directory outside the grid's ``out``), ``unlocated`` (a lens field mutation refused without
naming the field).

Output: ``--out PATH`` gets a JSON summary (counts per family and class, every finding
with its reproducer, and the findings grouped by kind); stdout gets a short summary.
Exit status 1 if any traceback, crash, hang or disagreement.

Modules: ``__main__`` (the command line), ``harness`` (the worker, its limits, the
summary), ``case`` (one case: its steps, findings and class), ``mutate`` and
``workspace`` (what the families share), and one module per family.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout
