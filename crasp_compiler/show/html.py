"""One self-contained HTML page of one input's pass through a model: no network access
(the data and a small plain-JavaScript viewer are inline). Pick a view (the residual
after a sublayer, a head's attention pattern, the decided outputs); hovering a cell shows
its row (definition or residual label), position and value."""

from __future__ import annotations

import html
import json
import math
from typing import Any

import numpy as np

from crasp_compiler.budget import require_memory
from crasp_compiler.model.model import Model
from crasp_compiler.show.data import (
    Trace,
    definitions,
    layout_groups,
    positions,
    stage_count,
    trace,
)

# Residual rows the page carries at most (those ever nonzero first when there are more).
MAX_ROWS = 400
# Peak bytes building the page takes per value it carries (the values as Python numbers,
# their JSON text, the page and its UTF-8 copy), measured with a margin.
PAGE_BYTES = 100
# Positions up to which the page carries every head's attention pattern: a pattern is
# positions² cells, which no browser draws usefully beyond this (and the page's JSON would
# take seconds to write); beyond it the page says so and keeps the residual and outputs.
MAX_PATTERN_POSITIONS = 512
# Characters of the data block ``json.dumps`` writes as ``\uXXXX`` so that no HTML
# parser state (``</script>``, ``<!--``) can begin inside it.
_HTML_SAFE = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"))


def _number(value: Any) -> float | str | None:
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return 1.0 if value else 0.0
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return None if math.isnan(number) or math.isinf(number) else number


def _numbers(values: Any) -> list[Any]:
    """:func:`_number` of each value, at numpy's speed where they are finite numbers."""
    array = np.asarray(values)
    if array.dtype.kind in "biuf":
        floats = array.astype(np.float64)
        if np.isfinite(floats).all():
            numbers: list[Any] = floats.tolist()
            return numbers
    return [_number(value) for value in values]


def _html_safe(text: str) -> str:
    for mark, escaped in _HTML_SAFE:
        text = text.replace(mark, escaped)
    return text


def _views(run: Trace) -> list[dict[str, Any]]:
    from crasp_compiler.show.figures import shown_rows  # no matplotlib at import

    rows = shown_rows(run, MAX_ROWS)
    views = []
    for stage in run.stages:
        views.append(
            {
                "title": f"residual after {stage.label}",
                "rows": [stage.rows[k] for k in rows],
                "columns": run.positions,
                "changed": [bool(stage.changed[k]) for k in rows],
                "values": [_numbers(stage.values[: len(run.positions), k]) for k in rows],
                "kind": "residual",
            }
        )
    for pattern in run.patterns if keeps_patterns(len(run.positions)) else ():
        views.append(
            {
                "title": f"attention L{pattern.layer + 1} head {pattern.head + 1}: {pattern.label}",
                "rows": [f"query {p}" for p in run.positions],
                "columns": run.positions,
                "changed": [False] * len(run.positions),
                "values": [_numbers(row) for row in pattern.weights],
                "kind": "attention",
            }
        )
    if run.outputs:
        views.append(
            {
                "title": "decided outputs",
                "rows": list(run.outputs),
                "columns": run.output_labels,
                "changed": [False] * len(run.outputs),
                "values": [_numbers(values) for values in run.outputs.values()],
                "kind": "outputs",
            }
        )
    return views


_SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("data").textContent);
  var pick = document.getElementById("view");
  var box = document.getElementById("plot");
  var tip = document.getElementById("tip");
  var NS = "http://www.w3.org/2000/svg";
  data.views.forEach(function (v, i) {
    var o = document.createElement("option");
    o.value = String(i);
    o.textContent = v.title;
    pick.appendChild(o);
  });
  function colour(v, scale, kind) {
    if (v === null) { return "#ddd"; }
    if (typeof v !== "number") { return "#eee"; }
    var a = Math.min(1, Math.abs(v) / scale);
    if (kind === "attention") { var g = Math.round(255 * (1 - a)); return "rgb(" + g + "," + g + "," + g + ")"; }
    var c = Math.round(255 * (1 - a));
    return v >= 0 ? "rgb(255," + c + "," + c + ")" : "rgb(" + c + "," + c + ",255)";
  }
  function el(name, attrs, text) {
    var e = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function show(i) {
    var v = data.views[i];
    var cell = 22, left = 12 + 7 * Math.max.apply(null, v.rows.map(function (r) { return r.length; }).concat([4])), top = 40;
    var scale = 1e-9;
    v.values.forEach(function (row) { row.forEach(function (x) { if (typeof x === "number") { scale = Math.max(scale, Math.abs(x)); } }); });
    var svg = el("svg", { width: left + cell * v.columns.length + 10, height: top + cell * v.rows.length + 10, id: "matrix" });
    v.columns.forEach(function (c, j) {
      svg.appendChild(el("text", { x: left + cell * j + cell / 2, y: top - 8, "text-anchor": "middle", "class": "col" }, c));
    });
    v.rows.forEach(function (r, k) {
      svg.appendChild(el("text", { x: left - 6, y: top + cell * k + cell * 0.7, "text-anchor": "end", "class": v.changed[k] ? "row changed" : "row" }, r));
      v.values[k].forEach(function (x, j) {
        var rect = el("rect", { x: left + cell * j, y: top + cell * k, width: cell - 1, height: cell - 1, fill: colour(x, scale, v.kind) });
        if (v.changed[k]) { rect.setAttribute("stroke", "#d4a000"); }
        rect.addEventListener("mousemove", function (ev) {
          tip.textContent = r + " @ position " + j + " (" + v.columns[j] + "): " + (x === null ? "NaN" : x);
          tip.style.left = (ev.pageX + 12) + "px";
          tip.style.top = (ev.pageY + 12) + "px";
          tip.style.display = "block";
        });
        rect.addEventListener("mouseleave", function () { tip.style.display = "none"; });
        svg.appendChild(rect);
      });
    });
    box.replaceChildren(svg);
  }
  pick.addEventListener("change", function () { show(Number(pick.value)); });
  show(0);
  document.body.setAttribute("data-ready", String(data.views.length));
})();
"""

_STYLE = """
body { font: 13px sans-serif; margin: 1em; }
table { border-collapse: collapse; margin-bottom: 1em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; }
text { font: 11px monospace; }
text.changed { fill: #a06000; font-weight: bold; }
#tip { position: absolute; display: none; background: #ffd; border: 1px solid #999;
       padding: 2px 5px; pointer-events: none; font: 12px monospace; }
"""


def keeps_patterns(positions: int) -> bool:
    """Whether a page of ``positions`` positions carries the attention patterns."""
    return positions <= MAX_PATTERN_POSITIONS


def page_bytes(model: Model, positions: int) -> float:
    """The bytes :func:`page` takes at its peak on an input of ``positions`` positions
    (BOS included), from the values its views carry."""
    heads = sum(len(layer.heads) for layer in model.layers)
    patterns = heads * positions if keeps_patterns(positions) else 0
    rows = stage_count(model) * min(model.width, MAX_ROWS) + patterns + len(model.outputs)
    return float(PAGE_BYTES * rows * positions)


def page(model: Model, item: Any, title: str = "crasp show") -> str:
    """The HTML page (a string) for ``model`` on one input of its language; CraspError
    before anything is computed when the page would not fit the memory budget."""
    length = len(item.positions) if isinstance(item, Trace) else positions(model, item)
    require_memory(page_bytes(model, length), f"the page of {length:,} positions")
    run = item if isinstance(item, Trace) else trace(model, item, patterns=keeps_patterns(length))
    data = {"views": _views(run)}
    payload = _html_safe(json.dumps(data, allow_nan=False))
    defs = definitions(model)
    if defs:
        head = "<tr><th>definition</th><th>residual form</th><th>computed at</th></tr>"
        body = "".join(
            f'<tr class="definition"><td>{html.escape(n)}</td><td>{html.escape(f)}</td>'
            f"<td>{html.escape(s)}</td></tr>"
            for n, f, s in defs
        )
    else:
        head = "<tr><th>residual rows</th><th>dimensions</th><th>count</th></tr>"
        body = "".join(
            f'<tr class="definition"><td>{html.escape(n)}</td><td>{a}&ndash;{b}</td>'
            f"<td>{c}</td></tr>"
            for n, c, a, b in layout_groups(model)[:200]
        )
    note = ""
    if any(layer.heads for layer in model.layers) and not keeps_patterns(len(run.positions)):
        note = (
            f"<p>Attention patterns are left out beyond {MAX_PATTERN_POSITIONS} positions "
            f"(this input has {len(run.positions):,}): draw them with <code>crasp show -o "
            "FILE.png</code>, or show a shorter input.</p>"
        )
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f"<p>input: {html.escape(run.text)} &middot; "
        f"{len(model.layers)} layers, width {model.width:,}</p>"
        f'<table id="definitions">{head}{body}</table>'
        '<label>view: <select id="view"></select></label>'
        "<p>Hover a cell: row, position, value. Rows a sublayer changed are framed.</p>"
        f"{note}"
        '<div id="plot"></div><div id="tip"></div>'
        f'<script type="application/json" id="data">{payload}</script>'
        f"<script>{_SCRIPT}</script></body></html>\n"
    )
