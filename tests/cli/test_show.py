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
from click.testing import CliRunner, Result

from crasp_compiler import api
from crasp_compiler.cli import main
from crasp_compiler.errors import CraspError
from crasp_compiler.show import (
    all_figures,
    attention_figure,
    definitions,
    outputs_figure,
    page,
    program_figure,
    program_graph,
    residual_figure,
    sites,
    trace,
)

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
DYCK = ROOT / "examples" / "crasp" / "dyck1.cr"
CUMSUM = ROOT / "examples" / "pcoc" / "cumsum.pcoc"
PERMUTE = ROOT / "examples" / "pcoc_sends" / "permute.pcoc"


def invoke(*args) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


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
    assert [t.get_text() for t in first.get_yticklabels()] == list(model.residual)
    assert [ax.get_title() for ax in figure.axes[:2]] == ["embed", "layer 1 attention"]
    attention = attention_figure(model, ["(", ")"])
    titles = [ax.get_title() for ax in attention.axes if ax.get_visible()]
    assert titles[0].startswith("L1 h0: ") and len(titles) == 4
    outputs = outputs_figure(model, "( )")
    assert [t.get_text() for t in outputs.axes[0].get_yticklabels()] == ["D"]
    assert len(all_figures(model, "( )")) == 4
    graph = program_figure(model)
    boxes = {t.get_text() for t in graph.axes[0].texts} - {""}  # arrows are empty texts
    assert boxes == set(model.info["definitions"])
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
        "<script>var c = document.querySelectorAll('#matrix rect')[1];"
        "c.dispatchEvent(new MouseEvent('mousemove', {bubbles: true}));</script></body>"
    )
    hover.write_text((tmp_path / "d.html").read_text().replace("</body>", poke))
    moved = subprocess.run(
        [*browser, "--dump-dom", hover.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert "CONSOLE" not in moved.stderr, moved.stderr
    assert re.search(r'<div id="tip"[^>]*>BOS @ position 1 \(\(\): 0</div>', moved.stdout)
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
    views = json.loads(block)["views"]
    assert views[0]["columns"][1] == "<!--<script>" and views[0]["columns"][2] == "$\\foo$"
    assert "token:<!--<script>" in views[0]["rows"]


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
    """At 600 positions: every 15th position labelled by its index, figures no larger
    than at 40, and no value written per cell."""
    import matplotlib.pyplot as plt

    from crasp_compiler.show import figures

    model = dyck()
    run = trace(model, " ".join(["("] * 300 + [")"] * 300))
    residual, attention, outputs, _ = all_figures(model, run)
    ticks = [t.get_text() for t in residual.axes[0].get_xticklabels()]
    assert ticks == [str(k) for k in range(0, 601, 16)]
    short = figures.figure_sizes(model, 41, "all")
    for figure, name in ((residual, "residual"), (attention, "attention"), (outputs, "outputs")):
        assert tuple(figure.get_size_inches()) == pytest.approx(short[name])
    assert [t for t in outputs.axes[0].texts] == []
    plt.close("all")


def test_many_stages_are_cut_to_the_first_panels(monkeypatch):
    import matplotlib.pyplot as plt

    from crasp_compiler.show import figures

    monkeypatch.setattr(figures, "MAX_PANELS", 2)
    run = trace(dyck(), "( )")
    residual = residual_figure(dyck(), run)
    assert [ax.get_title() for ax in residual.axes[:2]] == ["embed", "layer 1 attention"]
    assert residual.get_suptitle() == f"the first 2 of {len(run.stages)} stages"
    attention = attention_figure(dyck(), run)
    assert sum(ax.get_visible() for ax in attention.axes) == 2
    plt.close("all")


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
