"""``crasp show`` and :mod:`crasp_compiler.show`: pictures of one input's pass (residual
after every sublayer, attention patterns, decided outputs) as matplotlib figures, PNG,
SVG and one self-contained HTML page (loaded in headless Chromium when one exists); and
``crasp info``'s bounded summary of a wide model."""

from __future__ import annotations

import errno
import functools
import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result

from crasp_compiler import api
from crasp_compiler.errors import CraspError
from crasp_compiler.show import (
    all_figures,
    attention_figure,
    definitions,
    intervene,
    outputs_figure,
    page,
    program_figure,
    program_graph,
    residual_figure,
    sites,
    trace,
)
from tests.support.cli import invoke

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
DYCK = ROOT / "examples" / "crasp" / "dyck1.cr"
CUMSUM = ROOT / "examples" / "pcoc" / "cumsum.pcoc"
PERMUTE = ROOT / "examples" / "pcoc_sends" / "permute.pcoc"


def ok(*args) -> Result:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert result.exception is None
    return result


@functools.cache
def dyck():
    return api.compile(api.load(DYCK))


# Tokens an HTML parser or matplotlib's mathtext would read as markup.
HOSTILE = 'A = # "<!--<script>"\nB = # "$\\\\foo$"\nD = A > B\n'
HOSTILE_INPUT = "<!--<script> $\\foo$ <!--<script>"


@functools.cache
def hostile():
    return api.compile(api.load(HOSTILE, "crasp"))


@functools.cache
def cumsum():
    return api.compile(api.load(CUMSUM), n=4)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("show")
    from crasp_compiler.model import save_model

    save_model(dyck(), folder / "dyck1.npz")
    save_model(cumsum(), folder / "cumsum.npz")
    save_model(hostile(), folder / "hostile.npz")
    (folder / "vectors.txt").write_text("1 2 3 4\n-1 5 0 2\n")
    return folder


# ---------------------------------------------------------------- the trace


def test_trace_residuals_patterns_and_outputs():
    model = dyck()
    run = trace(model, "( ( ) )")
    assert run.rows == list(model.residual)
    assert run.positions == ["ε", "(", "(", ")", ")"]
    expected = api.run(model, [["(", "(", ")", ")"]], residuals=True).residuals
    assert expected is not None
    assert [s.label for s in run.stages] == [label for label, _ in expected]
    for stage, (_, values) in zip(run.stages, expected, strict=True):
        np.testing.assert_allclose(stage.values, values[0], atol=1e-12)
    # layer 1's heads write the counts (and only them), its MLP the comparisons
    changed = {s.label: {run.rows[k] for k in np.flatnonzero(s.changed)} for s in run.stages}
    assert changed["layer 1 attention"] == {"C_open", "C_close", "ONE"}
    assert "CV == 0 (<= half)" in changed["layer 2 mlp"]
    assert "C_open == C_close (<= half)" in changed["layer 1 mlp"]
    # counts are known as counts (c/(t+1), BOS included in t + 1) and read back as counts
    heads = run.stages[1]
    counted = {row for row, count in zip(heads.rows, heads.counts, strict=True) if count}
    assert counted == {"C_open", "C_close", "ONE", "CV"}
    np.testing.assert_array_equal(heads.count_values(run.rows.index("C_open")), [0, 1, 2, 2, 2])
    np.testing.assert_array_equal(heads.count_values(run.rows.index("C_close")), [0, 0, 0, 1, 2])
    np.testing.assert_array_equal(heads.count_values(run.rows.index("ONE")), [1] * 5)
    assert run.output_first == -1  # C-RASP's outputs begin with the empty prefix, at BOS
    assert [(p.layer, p.head) for p in run.patterns] == [
        (lay, h) for lay, layer in enumerate(model.layers) for h in range(len(layer.heads))
    ]
    for pattern in run.patterns:  # causal distributions over the keys
        np.testing.assert_allclose(pattern.weights.sum(axis=1), 1, atol=1e-12)
        assert np.all(np.triu(pattern.weights, 1) == 0)
    assert bool(run.outputs["D"][-1]) is True


def test_definitions_and_sites():
    model = dyck()
    where = sites(model)
    assert len(where) == model.width
    assert where[model.residual.index("C_open")] == "L1 head 1"
    assert where[model.residual.index("CV == 0 (<= half)")] == "L2 mlp"
    found = {name: site for name, _, site in definitions(model)}
    assert set(found) == set(model.info["definitions"])
    # D = M && B is read out from its literals (no dimension of its own): it exists once
    # the last of them is written
    assert "D" not in model.residual and found["D"] == "L2 mlp"


# ---------------------------------------------------------------- figures


def test_figures_from_python():
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    model = dyck()
    figure = residual_figure(model, "( ( ) )")
    assert isinstance(figure, Figure)
    first = figure.axes[0]
    counts = {"C_open", "C_close", "ONE", "CV"}  # marked, their cells written as counts
    assert [t.get_text() for t in first.get_yticklabels()] == [
        f"{label} (count)" if label in counts else label for label in model.residual
    ]
    assert [ax.get_title() for ax in figure.axes[:2]] == ["embed", "layer 1 attention"]
    written = [t.get_text() for t in figure.axes[1].texts]
    assert written == ["0", "1", "2", "2", "2", "0", "0", "0", "1", "2"] + ["1"] * 5
    attention = attention_figure(model, ["(", ")"])
    titles = [ax.get_title() for ax in attention.axes if ax.get_visible()]
    assert titles[0] == 'L1 head 1: # "("' and len(titles) == 4
    assert titles[3] == f"L2 head 1: {model.layers[1].heads[0].label}"
    outputs = outputs_figure(model, "( )")
    assert [t.get_text() for t in outputs.axes[0].get_yticklabels()] == ["D"]
    assert len(all_figures(model, "( )")) == 4
    graph = program_figure(model)
    boxes = {t.get_text() for t in graph.axes[0].texts} - {""}  # arrows are empty texts
    assert boxes == {f"{name}\n{site}" for name, _, site in definitions(model)}
    plt.close("all")


def test_program_graph():
    nodes, edges = program_graph(dyck())
    assert dict(nodes)["C_open"] == "L1 head 1" and dict(nodes)["D"] == "L2 mlp"
    assert ("B", "D") in edges and ("M", "D") in edges and ("C_open", "V") in edges
    with pytest.raises(CraspError, match="records no definitions"):
        program_figure(cumsum())


def test_pcoc_figures():
    import matplotlib.pyplot as plt

    model = cumsum()
    item = np.array([[1.0, 2.0, 3.0, 4.0]])
    run = trace(model, item)
    np.testing.assert_allclose(run.outputs["x"], [1, 3, 6, 10])
    assert run.output_labels == ["0", "1", "2", "3"]
    assert len(all_figures(model, run)) == 3
    plt.close("all")


def test_missing_matplotlib_is_a_user_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(CraspError, match=r"pip install 'crasp-compiler\[train\]'"):
        residual_figure(dyck(), "( )")


def test_show_without_matplotlib_says_how_to_get_it(files, tmp_path):
    script = (
        "import sys; sys.modules['matplotlib'] = None\nfrom crasp_compiler.cli import main\nmain()"
    )
    args = ["show", str(files / "dyck1.npz"), "( )", "-o", str(tmp_path / "d.png")]
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "pip install 'crasp-compiler[train]'" in proc.stderr
    html = ["show", str(files / "dyck1.npz"), "( )", "-o", str(tmp_path / "d.html")]
    assert subprocess.run([sys.executable, "-c", script, *html]).returncode == 0


def test_too_large_to_picture(monkeypatch):
    from crasp_compiler.show import data

    monkeypatch.setattr(data, "MAX_VALUES", 100)
    with pytest.raises(CraspError, match="too large to picture: 5 positions × width 13"):
        trace(dyck(), "( ( ) )")


def test_cli_does_not_import_matplotlib():
    code = (
        "import sys, crasp_compiler, crasp_compiler.cli, crasp_compiler.show; "
        "assert 'matplotlib' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- crasp show


def test_show_png_and_svg(files, tmp_path):
    out = ok("show", files / "dyck1.npz", "( ( ) )", "-o", tmp_path / "d.png").output.split()
    names = ("", ".attention", ".outputs", ".program")
    assert out == [str(tmp_path / f"d{s}.png") for s in names]
    for path in out:
        assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ok("show", files / "dyck1.npz", "( )", "--picture", "outputs", "-o", tmp_path / "o.svg")
    assert "<svg" in (tmp_path / "o.svg").read_text()


def test_show_pcoc_vector_line(files, tmp_path):
    vectors = files / "vectors.txt"
    ok("show", files / "cumsum.npz", vectors, "--line", "2", "-o", tmp_path / "c.png")
    assert (tmp_path / "c.outputs.png").exists()
    ok("show", files / "cumsum.npz", vectors, "--line", "2", "-o", tmp_path / "c.html")
    assert "-1 5 0 2" in (tmp_path / "c.html").read_text()
    result = invoke("show", files / "cumsum.npz", vectors, "--line", "3", "-o", tmp_path / "x.png")
    assert result.exit_code == 1 and "no input on line 3" in result.stderr


def test_show_refuses_other_suffixes(files, tmp_path):
    result = invoke("show", files / "dyck1.npz", "( )", "-o", tmp_path / "x.pdf")
    assert result.exit_code == 2 and ".png, .svg or .html" in result.output


def test_html_is_self_contained(files, tmp_path):
    ok("show", files / "dyck1.npz", "( ( ) )", "-o", tmp_path / "d.html")
    text = (tmp_path / "d.html").read_text()
    assert not re.search(r"<link|\bsrc=|\bhref=|@import|https://", text)
    assert text.count("http://") == text.count("http://www.w3.org/2000/svg")
    for name in dyck().info["definitions"]:
        assert f"<td>{name}</td>" in text
    assert page(cumsum(), np.array([[1.0, 2.0, 3.0, 4.0]])).startswith("<!DOCTYPE html>")


def _chromium() -> str | None:
    return next(
        (
            shutil.which(n)
            for n in ("chromium", "chromium-browser", "google-chrome")
            if shutil.which(n)
        ),
        None,
    )


@pytest.mark.skipif(_chromium() is None, reason="no chromium binary")
def test_html_in_headless_chromium(files, tmp_path):
    """The page runs without console messages (errors included: Chromium logs every
    console message and uncaught exception as ``CONSOLE``), its viewer builds one view
    per stage, head and the outputs, the DOM shows the definitions as heatmap rows, and
    a screenshot is not blank."""
    import matplotlib.image

    ok("show", files / "dyck1.npz", "( ( ) )", "-o", tmp_path / "d.html")
    browser = [_chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run"]
    browser += ["--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}"]
    url = (tmp_path / "d.html").as_uri()
    dump = subprocess.run(
        [*browser, "--dump-dom", url], capture_output=True, text=True, timeout=120
    )
    assert dump.returncode == 0, dump.stderr[-2000:]
    assert "CONSOLE" not in dump.stderr and "Uncaught" not in dump.stderr, dump.stderr
    model = dyck()
    stages = 1 + sum(bool(layer.heads) + (layer.mlp is not None) for layer in model.layers)
    views = stages + sum(len(layer.heads) for layer in model.layers) + 1  # + the outputs
    views += sum(bool(layer.heads) for layer in model.layers)  # each layer's heads together
    assert f'data-ready="{views}"' in dump.stdout
    rows = re.findall(r'<text[^>]*class="row[^"]*">([^<]*)</text>', dump.stdout)
    rows = [html.unescape(row) for row in rows]
    assert rows == list(model.residual)
    assert {"C_open", "C_close", "CV"} <= set(rows)
    table = re.findall(r'<tr class="definition"><td>([^<]*)</td>', dump.stdout)
    assert set(table) == set(model.info["definitions"]) and "D" in table
    # hovering a cell (a synthetic mousemove) shows its row, position and value
    hover = tmp_path / "hover.html"
    poke = (
        "<script>var c = document.querySelectorAll('svg.matrix rect')[1];"
        "c.dispatchEvent(new MouseEvent('mousemove', {bubbles: true}));</script></body>"
    )
    hover.write_text((tmp_path / "d.html").read_text().replace("</body>", poke))
    moved = subprocess.run(
        [*browser, "--dump-dom", hover.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert "CONSOLE" not in moved.stderr, moved.stderr
    assert re.search(r'<div id="tip"[^>]*>BOS @ position 0 \(\(\): 0</div>', moved.stdout)
    shot = tmp_path / "shot.png"
    run = subprocess.run(
        [*browser, f"--screenshot={shot}", "--window-size=900,700", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    pixels = matplotlib.image.imread(shot)
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 10


# ---------------------------------------------------------------- hostile text


def _data_block(text: str) -> str:
    return re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)[1]


def test_html_data_block_escapes_markup(files, tmp_path):
    """No ``<``, ``>`` or ``&`` in the data block: ``<!--<script`` in a token would put
    the HTML parser in its "script data double escaped" state, which swallows the
    viewer's script."""
    ok("show", files / "hostile.npz", HOSTILE_INPUT, "-o", tmp_path / "h.html")
    block = _data_block((tmp_path / "h.html").read_text())
    assert not set("<>&") & set(block)
    first = json.loads(block)["views"][0]["panels"][0]
    assert first["columns"][1] == "<!--<script>" and first["columns"][2] == "$\\foo$"
    assert "token:<!--<script>" in first["rows"]


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_figure_text_is_drawn_as_written(files, tmp_path, suffix):
    """``$\\foo$`` is a token, not mathtext (which refuses it with a traceback)."""
    out = ok("show", files / "hostile.npz", HOSTILE_INPUT, "-o", tmp_path / f"h{suffix}")
    assert len(out.output.split()) == 4
    if suffix == ".svg":  # the SVG writer keeps each text as a comment beside its glyphs
        assert "<!-- $\\foo$ -->" in (tmp_path / "h.svg").read_text()


def test_figures_make_no_mathtext():
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    model = hostile()
    figures = all_figures(model, HOSTILE_INPUT)
    texts = [t for f in figures for t in f.findobj(Text) if "$" in t.get_text()]
    assert texts and not any(t.get_parse_math() for t in texts)
    plt.close("all")


@pytest.mark.skipif(_chromium() is None, reason="no chromium binary")
def test_hostile_tokens_still_render_in_headless_chromium(files, tmp_path):
    ok("show", files / "hostile.npz", HOSTILE_INPUT, "-o", tmp_path / "h.html")
    browser = [_chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run"]
    browser += ["--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}"]
    dump = subprocess.run(
        [*browser, "--dump-dom", (tmp_path / "h.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "CONSOLE" not in dump.stderr and "Uncaught" not in dump.stderr, dump.stderr
    views = len(json.loads(_data_block((tmp_path / "h.html").read_text()))["views"])
    assert f'data-ready="{views}"' in dump.stdout
    columns = re.findall(r'<text[^>]*class="col">([^<]*)</text>', dump.stdout)
    assert [html.unescape(c) for c in columns] == ["ε", *HOSTILE_INPUT.split()]


# ---------------------------------------------------------------- writing files


def test_show_into_a_missing_folder_names_it(files, tmp_path):
    for name in ("x.png", "x.html"):
        result = invoke("show", files / "dyck1.npz", "( )", "-o", tmp_path / "no" / name)
        assert result.exit_code == 1
        assert result.stderr == f"{tmp_path / 'no'}: error: cannot write pictures: no such folder\n"
    assert not (tmp_path / "no").exists()


def _full_disk(target, *args, **kwargs):
    """A write that puts part of its file down, then runs out of space."""
    with open(target, "wb") as handle:
        handle.write(b"\0" * 10)
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("suffix", [".png", ".html"])
def test_show_on_a_full_disk_leaves_nothing(files, tmp_path, monkeypatch, suffix):
    from matplotlib.figure import Figure

    monkeypatch.setattr(Figure, "savefig", lambda self, target, **_: _full_disk(target))
    monkeypatch.setattr(Path, "write_bytes", _full_disk)
    out = tmp_path / "out"
    out.mkdir()
    result = invoke("show", files / "dyck1.npz", "( )", "-o", out / f"d{suffix}")
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1 and "No space left on device" in result.stderr
    assert str(out / f"d{suffix}") in result.stderr
    assert list(out.iterdir()) == []


# ---------------------------------------------------------------- size budgets


LONG = " ".join(["("] * 2500 + [")"] * 2500)


def test_a_long_page_is_refused_before_it_is_built(files, tmp_path, monkeypatch):
    from crasp_compiler.show import data

    monkeypatch.setattr(data, "trace", None)  # refused before any tracing
    monkeypatch.setenv("CRASP_MAX_MEMORY", "16M")
    result = invoke("show", files / "dyck1.npz", LONG, "-o", tmp_path / "d.html")
    assert result.exit_code == 1
    assert re.fullmatch(
        rf"{re.escape(str(tmp_path / 'd.html'))}: error: the page of 5,001 positions needs "
        r"about [\d.]+ MiB; the limit is 16 MiB \(set CRASP_MAX_MEMORY, .*\)\n",
        result.stderr,
    )
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(CraspError, match="the page of 5,001 positions needs about"):
        page(dyck(), LONG)


def test_a_long_page_leaves_the_attention_patterns_out_and_says_so(files, tmp_path):
    """Beyond 512 positions a pattern (positions² cells) is not carried: the 5,001-position
    page of Dyck-1 has its residual and outputs and a note (it took gigabytes and seconds
    of JSON; 2,700 positions passed the fuzz harness's 8 CPU-s)."""
    result = invoke("show", files / "dyck1.npz", LONG, "-o", tmp_path / "d.html")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "d.html").read_text()
    assert "Attention patterns are left out beyond 512 positions (this input has 5,001)" in text
    data = json.loads(re.search(r'id="data">(.*?)</script>', text, re.S).group(1))
    kinds = {view["kind"] for view in data["views"]}
    assert kinds == {"residual", "outputs"}
    short = page(dyck(), "( ( ) )")
    assert "left out" not in short and '"kind": "attention"' in short


def test_the_budget_bounds_pictures(files, tmp_path, monkeypatch):
    monkeypatch.setenv("CRASP_MAX_MEMORY", "10K")
    for name in ("d.png", "d.html"):
        result = invoke("show", files / "dyck1.npz", "( )", "-o", tmp_path / name)
        assert result.exit_code == 1 and "the limit is 10 KiB" in result.stderr
    monkeypatch.setenv("CRASP_MAX_MEMORY", "1K")
    with pytest.raises(CraspError, match="tracing the input needs about"):
        trace(dyck(), "( )")
    monkeypatch.delenv("CRASP_MAX_MEMORY")
    result = invoke("show", files / "dyck1.npz", "( )", "--dpi", "7000", "-o", tmp_path / "d.png")
    assert result.exit_code == 1 and "pixels at --dpi 7000 (at most 65,535 a side)" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_long_inputs_draw_bounded_figures():
    """At 600 positions: every 16th position labelled by its number (BOS, column 0, is
    position −1), figures no larger than at 40, and no value written per cell."""
    import matplotlib.pyplot as plt

    from crasp_compiler.show import figures

    model = dyck()
    run = trace(model, " ".join(["("] * 300 + [")"] * 300))
    residual, attention, outputs, _ = all_figures(model, run)
    for axis in (residual.axes[0].xaxis, attention.axes[0].yaxis, outputs.axes[0].xaxis):
        assert [t.get_text() for t in axis.get_ticklabels()] == [str(p) for p in range(0, 600, 16)]
        assert list(axis.get_ticklocs()) == [p + 1 for p in range(0, 600, 16)]
    short = {p.name: p.size for p in figures.pictures(model, 41, "all")}
    for figure, name in ((residual, "residual"), (attention, "attention"), (outputs, "outputs")):
        assert tuple(figure.get_size_inches()) == pytest.approx(short[name])
    assert [t for t in outputs.axes[0].texts] == []
    assert [t for ax in residual.axes for t in ax.texts] == []  # no counts written either
    plt.close("all")


def test_a_picture_too_large_for_one_file_is_written_in_parts(files, tmp_path, monkeypatch):
    """Beyond MAX_INCHES a side, the stages go to further files (OUTPUT.part2.png, ...),
    each saying which stages it holds; no figure exceeds the cap."""
    import matplotlib.pyplot as plt

    from crasp_compiler.show import figures

    monkeypatch.setattr(figures, "MAX_INCHES", 8.0)
    out = ok("show", files / "dyck1.npz", "( ( ) )", "-o", tmp_path / "d.png").output.split()
    names = ("", ".part2", ".part3", ".attention", ".outputs", ".program")
    assert out == [str(tmp_path / f"d{s}.png") for s in names]
    model, run = dyck(), trace(dyck(), "( ( ) )")
    shown = figures.pictures(model, len(run.positions), "all")
    assert [(p.name, p.part, p.parts) for p in shown][:3] == [("residual", k, 3) for k in (1, 2, 3)]
    assert all(max(p.size) <= 8.0 for p in shown)
    parts = [residual_figure(model, run, part) for part in (1, 2, 3)]
    assert [f.get_suptitle() for f in parts] == [
        "stages 1–2 of 5 (part 1 of 3)",
        "stages 3–4 of 5 (part 2 of 3)",
        "stage 5 of 5 (part 3 of 3)",
    ]
    titles = [ax.get_title() for f in parts for ax in f.axes if ax.get_visible() and ax.images]
    assert titles == [stage.label for stage in run.stages]
    with pytest.raises(CraspError, match="has 3 part"):
        residual_figure(model, run, 4)
    plt.close("all")


# ---------------------------------------------------------------- one numbering, names


INDUCTION = ROOT / "examples" / "crasp" / "induction_head.crasp"
SORT = ROOT / "examples" / "pcoc" / "sort.pcoc"
PAIRS = ROOT / "examples" / "pcoc_sends" / "pairs.pcoc"
# An IR id: what a PCOC row must not be called (``cmp#464``, ``min-in-branch#291``).
IR_ID = re.compile(r"[\w:-]+#\d+")


@functools.cache
def induction():
    return api.compile(api.load(INDUCTION))


def test_one_numbering_of_layers_and_heads_everywhere(files):
    """PNG/SVG titles, the HTML views, ``sites`` and ``crasp info`` name a head alike:
    ``L1 head 1``, layers and heads from 1."""
    import matplotlib.pyplot as plt

    model = dyck()
    run = trace(model, "( )")
    expected = [f"L{p.layer + 1} head {p.head + 1}" for p in run.patterns]
    assert expected == ["L1 head 1", "L1 head 2", "L1 head 3", "L2 head 1"]
    titles = [ax.get_title() for ax in attention_figure(model, run).axes if ax.get_visible()]
    assert [t.split(":")[0] for t in titles] == expected
    views = json.loads(_data_block(page(model, run)))["views"]
    shown = [v["title"] for v in views if v["kind"] == "attention"]
    assert [t.removeprefix("attention ").split(":")[0] for t in shown] == expected
    assert {site for site in sites(model) if "head" in site} <= set(expected)
    info = ok("info", files / "dyck1.npz").output
    assert "[L1 head 1]" in info and "head 0" not in info
    plt.close("all")


def test_head_titles_are_whole():
    """Three lookup heads differ only at the end of their labels: each title keeps its
    whole label (wrapped), not a cut."""
    import matplotlib.pyplot as plt

    model = induction()
    run = trace(model, "a b c a b")
    figure = attention_figure(model, run)
    titles = [ax.get_title() for ax in figure.axes if ax.get_visible()]
    assert [t.replace("\n", " ") for t in titles] == [p.title for p in run.patterns]
    lookups = [t.replace("\n", " ") for t in titles[1:4]]
    assert [t[-3:] for t in lookups] == ['"a"', '"b"', '"c"']
    assert any("\n" in t for t in titles) and not any("..." in t for t in titles)
    plt.close("all")


def _chain_program(size: int) -> str:
    """A C-RASP program of ``size`` definitions, five levels deep and wide, all read by
    its output (the last)."""
    width = (size - 3) // 3
    lines = ['alphabet "a", "b"', 'A = # "a"', 'B = # "b"']
    lines += [f"S{k} = A + {k} * B" for k in range(width)]
    lines += [f"G{k} = S{k} > {k}" for k in range(width)]
    lines += [f"H{k} = # (G{k} && G{(k + 1) % width})" for k in range(size - 3 - 2 * width)]
    lines.append("O = " + " + ".join(f"H{k}" for k in range(size - 3 - 2 * width)) + " > 0")
    return "\n".join(lines) + "\n"


def test_program_graph_of_sixty_definitions_is_laid_out_in_layers():
    """Sixty definitions: one column per dependency depth, every arrow to the right, no
    two boxes in one place, each box named with the sublayer that computes it, and the
    figure as tall as its fullest column needs (and no larger than the cap)."""
    import matplotlib.pyplot as plt

    from crasp_compiler.show import figures

    model = api.compile(api.load(_chain_program(60), "crasp"))
    nodes, edges = program_graph(model)
    assert len(nodes) == 60
    figure = program_figure(model)
    boxes = {t.get_text().split("\n")[0]: t.get_position() for t in figure.axes[0].texts}
    boxes.pop("")  # the arrows
    assert set(boxes) == {name for name, _ in nodes}
    assert len(set(boxes.values())) == 60
    depth = {name: x for name, (x, _) in boxes.items()}
    assert {depth["A"], depth["B"]} == {0} and depth["O"] == 4
    assert all(depth[used] < depth[user] for used, user in edges)
    column = [name for name in boxes if depth[name] == depth["S0"]]
    width, height = figure.get_size_inches()
    assert len(column) == 19 and height >= 0.6 * 19 and max(width, height) <= figures.MAX_INCHES
    site = dict(nodes)
    texts = {t.get_text() for t in figure.axes[0].texts}
    assert all(f"{name}\n{site[name]}" in texts for name, _ in nodes)
    plt.close("all")


def test_pcoc_rows_are_named_by_the_program():
    """PCOC residual rows say what the program computes there (the statement, the slot
    received), not the compiler's ids; the ids stay in ``rows``."""
    model = api.compile(api.load(SORT), n=4)
    run = trace(model, np.array([[4.0, 3.0, 2.0, 1.0]]))
    names = {name for stage in run.stages for name in stage.names}
    assert "min in a branch in `x = min(x, right)`" in names
    assert "x received (round 0)" in names
    assert not any(IR_ID.fullmatch(name) for name in names)
    assert any(IR_ID.fullmatch(row) for stage in run.stages for row in stage.rows)


PERMUTE_INPUT = (
    " ".join(str(k - 5) for k in range(32)) + " " + " ".join(str((7 * k) % 32) for k in range(32))
)


def test_a_wide_pcoc_residual_png_is_capped_and_scaled_per_row_group(tmp_path):
    """permute at n = 32 (132 dimensions, 13 stages): the residual PNG is at most
    MAX_INCHES × dpi pixels a side; rows carry program names; x (up to 26), d (up to 31)
    and the one-hot features (1) each fill their own colour scale."""
    import matplotlib.pyplot as plt
    from PIL import Image

    from crasp_compiler.show import figures

    out = tmp_path / "permute.npz"
    ok("compile", PERMUTE, "--n", "32", "-o", out)
    (tmp_path / "in.txt").write_text(PERMUTE_INPUT + "\n")
    args = ("show", out, tmp_path / "in.txt", "--picture", "residual", "-o", tmp_path / "p.png")
    ok(*args)
    width, height = Image.open(tmp_path / "p.png").size
    assert max(width, height) <= figures.MAX_INCHES * 100 and min(width, height) > 1000
    model = api.load_model(out)
    values = np.array([[float(v) for v in PERMUTE_INPUT.split()]]).reshape(2, 32)
    figure = residual_figure(model, values)
    titles = [ax.get_title() for ax in figure.axes if ax.get_visible() and ax.images]
    stages = [stage.label for stage in trace(model, values).stages]
    assert titles == stages and stages[-2:] == ["layer 7 mlp", "layer 8 attention"]  # no MLP
    embed = figure.axes[0]
    labels = [t.get_text() for t in embed.get_yticklabels()]
    assert "x ±26" in labels and "d ±31" in labels and "onehot:3" in labels
    image = embed.images[0].get_array()
    for label in ("x ±26", "d ±31", "onehot:3"):
        assert np.max(np.abs(image[labels.index(label)])) == pytest.approx(1.0)
    shown = [t.get_text() for ax in figure.axes for t in ax.get_yticklabels()]
    assert "x received (round 0) ±26" in shown
    assert not any(IR_ID.search(label) for label in shown)
    plt.close("all")


def test_menu_entries_are_capped(tmp_path):
    """A head receiving dozens of routing fields: its menu entry fits MAX_MENU, its
    heading says what it receives, per send; the rows table names program values."""
    from crasp_compiler.show import html as show_html

    model = api.compile(api.load(PAIRS), n=8)
    values = np.array([[1.0] * 8, [2.0] * 8, [float(k // 2) for k in range(8)]])
    text = page(model, values)
    views = json.loads(_data_block(text))["views"]
    assert all(len(v["menu"]) <= show_html.MAX_MENU for v in views)
    routed = [v for v in views if "routing field(s) of send x to d" in v["title"]]
    assert routed and all("… (+" in v["menu"] for v in routed)
    assert all("send y to d" in v["title"] for v in routed)
    table = re.findall(r'<tr class="definition"><td>([^<]*)</td>', text)
    assert "x received (round 0)" in table and not any(IR_ID.search(row) for row in table)


def test_short_keeps_what_tells_apart():
    from crasp_compiler.show.data import short

    names = ", ".join(f"slot{k}" for k in range(56))
    menu = short(f"attention L5 head 1: round 1: recv {names}", 61)
    assert menu == "attention L5 head 1: round 1: recv slot0, slot1, … (+54 more)"
    assert short(f"attention L5 head 1: round 1: recv {names}", 60).endswith("(+55 more)")
    # a comma inside brackets is no list: the end, which tells three lookups apart, stays
    assert short("P(i-1) in #[j <= i, j == i - 1] " + '"c"', 20) == 'P(i-1) in…i - 1] "c"'
    assert short("short", 20) == "short"


# ---------------------------------------------------------------- interventions


def test_intervene_on_a_head_a_variable_and_from_another_input():
    model = dyck()
    head = intervene(model, "( ( ) )", "L1 head 1")
    assert head.what == "L1 head 1 ablated" and head.labels == ["ε", "(", "(", ")", ")"]
    np.testing.assert_array_equal(head.before["D"], [True, False, False, False, True])
    # without the count of "(", every prefix has C_open = 0 <= C_close: D holds up to the
    # first ")", where V = C_open < C_close makes CV positive for good
    np.testing.assert_array_equal(head.after["D"], [True, True, True, False, False])
    # the head writes C_open and nothing else: ablating the variable is the same
    variable = intervene(model, "( ( ) )", "C_open")
    np.testing.assert_array_equal(variable.after["D"], head.after["D"])
    same = intervene(model, "( ( ) )", "L1 mlp", source="( ( ) )")
    np.testing.assert_array_equal(same.after["D"], same.before["D"])
    # C_open from ") ) ( (": no "(" before the first ")", so every prefix is balanced
    patched = intervene(model, "( ( ) )", "C_open", source=") ) ( (")
    assert patched.what == "C_open patched from ) ) ( ("
    np.testing.assert_array_equal(patched.after["D"], [True] * 5)
    with pytest.raises(CraspError, match="nothing to intervene on named 'E'"):
        intervene(model, "( )", "E")
    with pytest.raises(CraspError, match="same length: 4 tokens, not 2"):
        intervene(model, "( ( ) )", "C_open", source="( )")


def test_show_ablate_draws_the_outputs_side_by_side(files, tmp_path):
    import matplotlib.pyplot as plt

    out = ok(
        "show",
        files / "dyck1.npz",
        "( ( ) )",
        "--picture",
        "outputs",
        "--ablate",
        "L1 head 1",
        "-o",
        tmp_path / "o.png",
    )
    assert out.output.split() == [str(tmp_path / "o.png")]
    from PIL import Image

    from crasp_compiler.show import figures

    (side_by_side,) = figures.pictures(dyck(), 5, "outputs", compared=True)
    (alone,) = figures.pictures(dyck(), 5, "outputs")
    assert side_by_side.size[0] > 2 * alone.size[0]
    width, height = Image.open(tmp_path / "o.png").size
    assert (width, height) == pytest.approx(
        (100 * side_by_side.size[0], 100 * side_by_side.size[1]), abs=1
    )
    figure = outputs_figure(dyck(), "( ( ) )", intervene(dyck(), "( ( ) )", "L1 head 1"))
    assert [ax.get_title() for ax in figure.axes] == ["as compiled", "L1 head 1 ablated"]
    assert figure.get_suptitle() == "3 decided output(s) changed"
    framed = [p for p in figure.axes[1].patches if p.get_edgecolor()[:3] == (1.0, 0.0, 0.0)]
    assert sorted(p.get_x() + 0.5 for p in framed) == [1, 2, 4]
    assert [t.get_text() for t in figure.axes[1].texts] == ["T", "T", "T", "F", "F"]
    bad = invoke(
        "show", files / "dyck1.npz", "( )", "--ablate", "L9 head 1", "-o", tmp_path / "x.png"
    )
    assert bad.exit_code == 1 and "nothing to intervene on named 'L9 head 1'" in bad.stderr
    lone = invoke(
        "show", files / "dyck1.npz", "( )", "--patch-from", "( )", "-o", tmp_path / "x.png"
    )
    assert lone.exit_code == 2 and "--patch-from needs --ablate" in lone.output
    unseen = invoke(
        "show", files / "dyck1.npz", "( )", "--ablate", "L1 head 1", "--picture", "residual",
        "-o", tmp_path / "x.png",
    )  # fmt: skip
    assert unseen.exit_code == 2 and "use --picture outputs or all" in unseen.output
    assert sorted(tmp_path.iterdir()) == [tmp_path / "o.png"]
    plt.close("all")


# ---------------------------------------------------------------- the page in Chromium


def _browse(tmp_path: Path, page_file: Path, poke: str = "") -> str:
    """The DOM of ``page_file`` after its viewer and the script ``poke`` ran in headless
    Chromium; no console message (errors included) allowed."""
    browser = [_chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run"]
    browser += ["--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}"]
    target = page_file
    if poke:
        target = tmp_path / f"poked-{page_file.name}"
        target.write_text(
            page_file.read_text().replace("</body>", f"<script>{poke}</script></body>")
        )
    dump = subprocess.run(
        [*browser, "--dump-dom", target.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dump.returncode == 0, dump.stderr[-2000:]
    assert "CONSOLE" not in dump.stderr and "Uncaught" not in dump.stderr, dump.stderr
    return dump.stdout


def _pick(view: int) -> str:
    return (
        f"var s = document.getElementById('view'); s.value = '{view}';"
        "s.dispatchEvent(new Event('change'));"
    )


def _hover(view: int, cell: int) -> str:
    """Script: open menu entry ``view``, then hover the ``cell``-th matrix cell."""
    return _pick(view) + (
        f"var c = document.querySelectorAll('svg.matrix rect')[{cell}];"
        "c.dispatchEvent(new MouseEvent('mousemove', {bubbles: true}));"
    )


@pytest.mark.skipif(_chromium() is None, reason="no chromium binary")
def test_counts_and_positions_in_the_page(files, tmp_path):
    """Hovering C_open after layer 1's heads at the second "(" (position 1, BOS at −1)
    shows the count 2 beside the stored 2/3; the count is written in the cell too."""
    ok("show", files / "dyck1.npz", "( ( ) )", "-o", tmp_path / "d.html")
    row, column, positions = dyck().residual.index("C_open"), 2, 5
    dom = _browse(tmp_path, tmp_path / "d.html", _hover(1, row * positions + column))
    assert re.search(
        r'<div id="tip"[^>]*>C_open @ position 1 \(\(\): 2 \(0\.666666666666666\d\)</div>', dom
    )
    cells = re.findall(r'<text[^>]*class="cell">([^<]*)</text>', dom)
    assert cells[:5] == ["0", "1", "2", "2", "2"]  # C_open's counts, BOS first
    # the first head's pattern: the query at position 1 averages keys −1 … 1
    dom = _browse(tmp_path, tmp_path / "d.html", _hover(5, 2 * positions + 1))
    assert re.search(
        r'<div id="tip"[^>]*>query 1 \(\(\) @ key 0 \(\(\): 0\.333333333333333\d</div>', dom
    )


@pytest.mark.skipif(_chromium() is None, reason="no chromium binary")
def test_multi_head_view_shades_what_a_token_attends_to(tmp_path):
    """Layer 1 of the induction head, its four heads side by side: hovering the token at
    position 2 shades each head's keys by that query's attention weights."""
    model = induction()
    run = trace(model, "a b c a b")
    (tmp_path / "i.html").write_text(page(model, run))
    views = json.loads(_data_block((tmp_path / "i.html").read_text()))["views"]
    layer = next(k for k, v in enumerate(views) if v["kind"] == "heads")
    poke = _pick(layer) + (
        "var q = document.querySelectorAll('.token.query')[3];"
        "q.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));"
    )
    dom = _browse(tmp_path, tmp_path / "i.html", poke)
    heads = re.findall(r'<div class="head">(.*?)<svg', dom, re.S)
    first = [p for p in run.patterns if p.layer == 0]
    assert len(heads) == len(first) == 4
    for block, pattern in zip(heads, first, strict=True):
        assert html.unescape(re.search(r'class="title">([^<]*)<', block)[1]) == pattern.title
        weights = [float(w) for w in re.findall(r'data-weight="([^"]*)"', block)]
        np.testing.assert_allclose(weights, pattern.weights[3], atol=1e-12)
    focused = re.findall(r'<span class="token query focus" data-position="(-?\d+)">', dom)
    assert focused == ["2"]


@pytest.mark.skipif(_chromium() is None, reason="no chromium binary")
def test_the_page_opens_on_the_intervention(files, tmp_path):
    ok(
        "show",
        files / "dyck1.npz",
        "( ( ) )",
        "--ablate",
        "C_open",
        "--patch-from",
        ") ) ( (",
        "-o",
        tmp_path / "d.html",
    )
    dom = _browse(tmp_path, tmp_path / "d.html")
    assert "outputs: C_open patched from ) ) ( ( (3 decided output(s) changed)" in dom
    assert len(re.findall(r'class="marked"', dom)) == 3
    assert re.findall(r'<div class="title">([^<]*)</div>', dom) == [
        "as compiled",
        "C_open patched from ) ) ( (",
    ]


# ---------------------------------------------------------------- crasp info


def test_info_summary_is_bounded(tmp_path):
    """A wide model's summary is a few dozen lines; --layout lists every dimension."""
    out = tmp_path / "permute.npz"
    ok("compile", PERMUTE, "--n", "16", "-o", out)
    model = api.load_model(out)
    summary = ok("info", out).output.splitlines()
    assert len(summary) < 60 < model.width
    assert any(re.match(r"^\s+\d+-\d+  onehot:\* \(\d+ dimensions\)$", line) for line in summary)
    full = ok("info", "--layout", out).output.splitlines()
    layout = full[full.index("  residual layout:") + 1 :]
    assert len(layout) == model.width
    last = model.occupants[-1] if model.occupants else [(0, model.residual[-1])]
    assert layout[-1].split()[:2] == [str(model.width - 1), last[0][1]]
    # a reused dimension lists each value it holds, with the sublayer that writes it
    held = [label for _, label in last if label]
    assert layout[-1].count(" → ") == len(held) - 1 and layout[-1].count("  [L") == len(held)
