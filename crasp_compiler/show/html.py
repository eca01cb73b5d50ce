"""One self-contained HTML page of one input's pass through a model: no network access
(the data and a small plain-JavaScript viewer are inline). Pick a view: the residual
after a sublayer, a head's attention pattern, a layer's heads side by side (hover a token
to see what each head attends to from it), the decided outputs, and with an intervention
the outputs as compiled beside the outputs with it. Hovering a cell shows its row
(definition or residual label), position (BOS at −1, as in the traces) and value, a
count as the count and the stored fraction."""

from __future__ import annotations

import html
import json
import math
from typing import Any

import numpy as np

from crasp_compiler.budget import require_memory
from crasp_compiler.model.model import Model
from crasp_compiler.show.data import (
    FIRST,
    Intervention,
    Trace,
    definitions,
    label_kind,
    positions,
    row_group,
    row_names,
    row_scales,
    short,
    stage_count,
    trace,
    writes,
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
# Characters of a view's entry in the menu at most (the view's heading has it in full,
# a list of names cut to MAX_HEADING).
MAX_MENU = 100
MAX_HEADING = 600
# Rows of the table of residual rows at most.
MAX_TABLE = 200
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


def _view(title: str, kind: str, panels: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    heading = short(title, MAX_HEADING)
    return {
        "title": heading,
        "menu": short(title, MAX_MENU),
        "kind": kind,
        "panels": panels,
    } | extra


def _residual(run: Trace, rows: list[int]) -> list[dict[str, Any]]:
    scales = row_scales(run, rows)
    views = []
    for stage in run.stages:
        panel = {
            "rows": [stage.names[k] for k in rows],
            "ids": [stage.rows[k] if stage.rows[k] != stage.names[k] else None for k in rows],
            "columns": run.positions,
            "first": FIRST,
            "changed": [bool(stage.changed[k]) for k in rows],
            "values": [_numbers(stage.values[: len(run.positions), k]) for k in rows],
            "scales": [scales[row_group(stage.rows[k], bool(stage.counts[k]))] for k in rows],
            "counts": [_numbers(stage.count_values(k)) if stage.counts[k] else None for k in rows],
        }
        views.append(_view(f"residual after {stage.label}", "residual", [panel]))
    return views


def _views(run: Trace, intervention: Intervention | None = None) -> list[dict[str, Any]]:
    from crasp_compiler.show.figures import shown_rows  # no matplotlib at import

    views = _residual(run, shown_rows(run, MAX_ROWS))
    layers: dict[int, list[int]] = {}
    for pattern in run.patterns if keeps_patterns(len(run.positions)) else ():
        layers.setdefault(pattern.layer, []).append(len(views))
        panel = {
            "title": pattern.title,
            "rows": [f"query {k + FIRST} ({p})" for k, p in enumerate(run.positions)],
            "columns": run.positions,
            "first": FIRST,
            "across": "key",
            "values": [_numbers(row) for row in pattern.weights],
        }
        views.append(_view(f"attention {pattern.title}", "attention", [panel]))
    for layer, members in layers.items():
        views.append(
            _view(
                f"layer {layer + 1}: its {len(members)} head(s) side by side",
                "heads",
                [{"view": k} for k in members],
                tokens=run.positions,
                first=FIRST,
            )
        )
    if run.outputs:
        views.append(_view("decided outputs", "outputs", [_outputs_panel(run, run.outputs, "")]))
    if intervention is not None:
        before = _outputs_panel(run, intervention.before, "as compiled")
        after = _outputs_panel(run, intervention.after, intervention.what)
        after["marked"] = [
            [not _same(a, b) for a, b in zip(x, y, strict=True)]
            for x, y in zip(before["values"], after["values"], strict=True)
        ]
        changed = sum(map(sum, after["marked"]))
        title = f"outputs: {intervention.what} ({changed} decided output(s) changed)"
        views.append(_view(title, "intervention", [before, after]))
    return views


def _outputs_panel(run: Trace, outputs: dict[str, Any], title: str) -> dict[str, Any]:
    return {
        "title": title,
        "rows": list(outputs),
        "columns": run.output_labels,
        "first": run.output_first,
        "values": [_numbers(values) for values in outputs.values()],
    }


def _same(a: Any, b: Any) -> bool:
    return bool(a == b)


_SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("data").textContent);
  var pick = document.getElementById("view");
  var box = document.getElementById("plot");
  var heading = document.getElementById("heading");
  var tip = document.getElementById("tip");
  var NS = "http://www.w3.org/2000/svg";
  data.views.forEach(function (v, i) {
    var o = document.createElement("option");
    o.value = String(i);
    o.textContent = v.menu;
    o.title = v.title;
    pick.appendChild(o);
  });
  function colour(v, scale, kind) {
    if (v === null) { return "#ddd"; }
    if (typeof v !== "number") { return "#eee"; }
    var a = Math.min(1, Math.abs(v) / scale);
    if (kind === "attention" || kind === "heads") { var g = Math.round(255 * (1 - a)); return "rgb(" + g + "," + g + "," + g + ")"; }
    var c = Math.round(255 * (1 - a));
    return v >= 0 ? "rgb(255," + c + "," + c + ")" : "rgb(" + c + "," + c + ",255)";
  }
  function el(name, attrs, text) {
    var e = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function html(name, cls, text) {
    var e = document.createElement(name);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function say(ev, text) {
    tip.textContent = text;
    tip.style.left = (ev.pageX + 12) + "px";
    tip.style.top = (ev.pageY + 12) + "px";
    tip.style.display = "block";
  }
  function shown(x) { return x === null ? "NaN" : String(x); }
  function largest(values) {
    var scale = 1e-9;
    values.forEach(function (row) { row.forEach(function (x) { if (typeof x === "number") { scale = Math.max(scale, Math.abs(x)); } }); });
    return scale;
  }
  // one matrix: rows × columns of values, a tooltip per cell
  function matrix(p, kind, cell, onhover) {
    var labels = kind === "heads" ? 0 : 12 + 7 * Math.max.apply(null, p.rows.map(function (r) { return r.length; }).concat([4]));
    var top = kind === "heads" ? 4 : 40;
    var scale = largest(p.values);
    var svg = el("svg", { width: labels + cell * p.columns.length + 10, height: top + cell * p.rows.length + 10, "class": "matrix" });
    if (kind !== "heads") {
      p.columns.forEach(function (c, j) {
        svg.appendChild(el("text", { x: labels + cell * j + cell / 2, y: top - 8, "text-anchor": "middle", "class": "col" }, c));
      });
    }
    p.rows.forEach(function (r, k) {
      var changed = p.changed && p.changed[k];
      if (kind !== "heads") {
        svg.appendChild(el("text", { x: labels - 6, y: top + cell * k + cell * 0.7, "text-anchor": "end", "class": changed ? "row changed" : "row" }, r));
      }
      p.values[k].forEach(function (x, j) {
        var rowscale = p.scales ? p.scales[k] : scale;
        var rect = el("rect", { x: labels + cell * j, y: top + cell * k, width: cell - 1, height: cell - 1, fill: colour(x, rowscale, kind) });
        if (changed) { rect.setAttribute("stroke", "#d4a000"); }
        if (p.marked && p.marked[k][j]) { rect.setAttribute("stroke", "#d00000"); rect.setAttribute("stroke-width", "2"); rect.setAttribute("class", "marked"); }
        rect.addEventListener("mousemove", function (ev) {
          var value = p.counts && p.counts[k] ? shown(p.counts[k][j]) + " (" + shown(x) + ")" : shown(x);
          var id = p.ids && p.ids[k] ? " [" + p.ids[k] + "]" : "";
          say(ev, r + id + " @ " + (p.across || "position") + " " + (j + p.first) + " (" + p.columns[j] + "): " + value);
          if (onhover) { onhover(k); }
        });
        rect.addEventListener("mouseleave", function () { tip.style.display = "none"; });
        svg.appendChild(rect);
        // a value written in its cell: decided outputs, and counts (as counts), when few
        var few = p.values.length * p.columns.length <= 400;
        var counted = p.counts && p.counts[k] && p.columns.length <= 40;
        if (counted || (few && (kind === "outputs" || kind === "intervention"))) {
          svg.appendChild(el("text", { x: labels + cell * j + cell / 2, y: top + cell * k + cell * 0.7, "text-anchor": "middle", "class": "cell" }, shown(counted ? p.counts[k][j] : x)));
        }
      });
    });
    return svg;
  }
  // a layer's heads side by side: hover a token (a query) to shade the keys it attends to
  function heads(v) {
    var wrap = html("div", "heads");
    var strip = html("div", "tokens");
    var queries = v.tokens.map(function (t, q) {
      var s = html("span", "token query", t);
      s.setAttribute("data-position", String(q + v.first));
      s.addEventListener("mouseover", function () { focus(q); });
      strip.appendChild(s);
      return s;
    });
    wrap.appendChild(html("div", "note", "hover a token: each head's keys shaded by its attention from there"));
    wrap.appendChild(strip);
    var grid = html("div", "grid");
    var cell = Math.max(3, Math.min(20, Math.floor(320 / v.tokens.length)));
    var panes = v.panels.map(function (ref) {
      var p = data.views[ref.view].panels[0];
      var head = html("div", "head");
      head.appendChild(html("div", "title", p.title));
      var keys = html("div", "tokens");
      var spans = v.tokens.map(function (t, j) {
        var s = html("span", "token key", t);
        s.setAttribute("data-position", String(j + v.first));
        keys.appendChild(s);
        return s;
      });
      head.appendChild(keys);
      var svg = matrix(p, "heads", cell, focus);
      var mark = el("rect", { x: 0, y: 0, width: cell * v.tokens.length, height: cell, fill: "none", stroke: "#2060c0", "stroke-width": 2, "class": "focus" });
      svg.appendChild(mark);
      head.appendChild(svg);
      grid.appendChild(head);
      return { p: p, spans: spans, mark: mark };
    });
    wrap.appendChild(grid);
    function focus(q) {
      queries.forEach(function (s, j) { s.classList.toggle("focus", j === q); });
      panes.forEach(function (h) {
        h.mark.setAttribute("y", String(4 + cell * q));
        h.spans.forEach(function (s, j) {
          var w = h.p.values[q][j];
          w = typeof w === "number" ? w : 0;
          s.setAttribute("data-weight", String(w));
          s.style.background = "rgba(32, 96, 192, " + w + ")";
          s.style.color = w > 0.5 ? "#fff" : "#000";
        });
      });
    }
    focus(v.tokens.length - 1);
    return wrap;
  }
  function show(i) {
    var v = data.views[i];
    heading.textContent = v.title;
    if (v.kind === "heads") { box.replaceChildren(heads(v)); return; }
    var row = html("div", "panels");
    v.panels.forEach(function (p) {
      var one = html("div", "panel");
      if (v.panels.length > 1) { one.appendChild(html("div", "title", p.title)); }
      one.appendChild(matrix(p, v.kind, 22));
      row.appendChild(one);
    });
    box.replaceChildren(row);
  }
  pick.addEventListener("change", function () { show(Number(pick.value)); });
  pick.value = String(data.start);
  show(data.start);
  document.body.setAttribute("data-ready", String(data.views.length));
})();
"""

_STYLE = """
body { font: 13px sans-serif; margin: 1em; }
table { border-collapse: collapse; margin-bottom: 1em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; }
text { font: 11px monospace; }
text.changed { fill: #a06000; font-weight: bold; }
text.cell { font-size: 9px; pointer-events: none; }
select { max-width: 60em; }
#heading { font-weight: bold; overflow-wrap: anywhere; }
.panels, .grid { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }
.title { font: 12px monospace; max-width: 24em; overflow-wrap: anywhere; margin: 0.3em 0; }
.tokens { display: flex; flex-wrap: wrap; gap: 2px; margin: 0.3em 0; max-width: 60em; }
.token { font: 12px monospace; border: 1px solid #bbb; padding: 1px 4px; cursor: default; }
.token.focus { outline: 2px solid #2060c0; }
.note { color: #555; }
#tip { position: absolute; display: none; background: #ffd; border: 1px solid #999;
       padding: 2px 5px; pointer-events: none; font: 12px monospace; }
"""


def keeps_patterns(positions: int) -> bool:
    """Whether a page of ``positions`` positions carries the attention patterns."""
    return positions <= MAX_PATTERN_POSITIONS


def page_bytes(model: Model, positions: int) -> float:
    """The bytes :func:`page` takes at its peak on an input of ``positions`` positions
    (BOS included), from the values its views carry (a count row carries two)."""
    heads = sum(len(layer.heads) for layer in model.layers)
    patterns = heads * positions if keeps_patterns(positions) else 0
    rows = 2 * stage_count(model) * min(model.width, MAX_ROWS) + patterns
    return float(PAGE_BYTES * (rows + 3 * len(model.outputs)) * positions)


def _rows_table(model: Model) -> str:
    """The residual rows by what they hold (the program's names where the model has
    them): each with its dimensions and how many."""
    names = row_names(model)
    groups: dict[str, set[int]] = {}
    for k, held in enumerate(writes(model)):
        for _, label in held:
            kind = label_kind(label)
            key = names.get(label) or (f"{kind}*" if kind else label)
            groups.setdefault(key, set()).add(k)
    body = []
    for name, dims in list(groups.items())[:MAX_TABLE]:
        body.append(
            f'<tr class="definition"><td>{html.escape(name)}</td>'
            f"<td>{html.escape(_spans(sorted(dims)))}</td><td>{len(dims)}</td></tr>"
        )
    more = len(groups) - MAX_TABLE
    if more > 0:
        body.append(f"<tr><td colspan=3>… {more:,} more</td></tr>")
    return "<tr><th>residual rows</th><th>dimensions</th><th>count</th></tr>" + "".join(body)


def _spans(dims: list[int], limit: int = 8) -> str:
    """``3–35, 38, 41`` for sorted dimensions, the first ``limit`` runs."""
    runs: list[list[int]] = []
    for k in dims:
        if runs and k == runs[-1][1] + 1:
            runs[-1][1] = k
        else:
            runs.append([k, k])
    text = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs[:limit])
    return text + (f", … ({len(runs) - limit} more)" if len(runs) > limit else "")


def page(
    model: Model,
    item: Any,
    title: str = "crasp show",
    intervention: Intervention | None = None,
) -> str:
    """The HTML page (a string) for ``model`` on one input of its language (with an
    ``intervention``'s outputs beside the compiled ones, the view shown first);
    CraspError before anything is computed when the page would not fit the memory
    budget."""
    length = len(item.positions) if isinstance(item, Trace) else positions(model, item)
    require_memory(page_bytes(model, length), f"the page of {length:,} positions")
    run = item if isinstance(item, Trace) else trace(model, item, patterns=keeps_patterns(length))
    views = _views(run, intervention)
    data = {"views": views, "start": len(views) - 1 if intervention is not None else 0}
    payload = _html_safe(json.dumps(data, allow_nan=False))
    defs = definitions(model)
    if defs:
        table = "<tr><th>definition</th><th>residual form</th><th>computed at</th></tr>"
        table += "".join(
            f'<tr class="definition"><td>{html.escape(n)}</td><td>{html.escape(f)}</td>'
            f"<td>{html.escape(s)}</td></tr>"
            for n, f, s in defs
        )
    else:
        table = _rows_table(model)
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
        f'<table id="definitions">{table}</table>'
        '<label>view: <select id="view"></select></label>'
        "<p>Hover a cell: row, position (BOS is −1), value; a count shows as the count and, "
        "in brackets, the stored fraction count/(t+1). Rows a sublayer changed are framed; "
        "colours are scaled per row group.</p>"
        f'{note}<p id="heading"></p>'
        '<div id="plot"></div><div id="tip"></div>'
        f'<script type="application/json" id="data">{payload}</script>'
        f"<script>{_SCRIPT}</script></body></html>\n"
    )
