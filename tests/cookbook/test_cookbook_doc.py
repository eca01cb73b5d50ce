"""docs/cookbook.md against the code, so that its table cannot silently go stale.

Every public function defined in the cookbook modules (``ffn``, ``attention``,
``layernorm``) must appear in the table as ``module.function``; every ``module.name`` the
page mentions must exist; every table row must cite at least one test, and every test
the page cites must be defined in ``tests/``; the page's Python snippets must run.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from crasp_compiler.cookbook import attention, ffn, layernorm

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cookbook.md"
MODULES = {"ffn": ffn, "attention": attention, "layernorm": layernorm}
# `ffn.name`, `attention.name`, `layernorm.name`, not a path such as cookbook/ffn.py
MENTION = re.compile(r"(?<![\w/])(ffn|attention|layernorm)\.([A-Za-z_]\w*)")
TEST_NAME = re.compile(r"\btest_\w+\b(?!\.py)")
CELL_SEPARATOR = re.compile(r"(?<!\\)\|")


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def public_functions(module) -> list[str]:
    """Names of the top-level functions defined in ``module``'s source, not starting
    with ``_`` (imported names do not count)."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    ]


def table_rows(text: str) -> list[list[str]]:
    """The cells of every body row of the page's table (header and separator dropped)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    assert len(lines) > 2, "docs/cookbook.md has no table"
    assert set(lines[1].replace("|", "").strip()) <= {"-", ":", " "}, "no separator row"
    rows = []
    for line in lines[2:]:
        cells = [cell.strip() for cell in CELL_SEPARATOR.split(line.strip())[1:-1]]
        rows.append(cells)
    return rows


def defined_tests() -> set[str]:
    """Every test function (module level or in a class) defined under tests/."""
    names = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            is_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_function and node.name.startswith("test_"):
                names.add(node.name)
    return names


def test_the_modules_define_public_functions():
    """The AST scan finds the functions (a scan that finds nothing would pass vacuously)."""
    for name, module in MODULES.items():
        found = public_functions(module)
        assert len(found) >= 5, (name, found)
        for function in found:
            assert callable(getattr(module, function)), (name, function)
    assert "gt_zero" in public_functions(ffn) and "sharpen" in public_functions(attention)
    assert "_form" not in public_functions(ffn)


@pytest.mark.parametrize("module_name", sorted(MODULES))
def test_every_public_function_is_in_the_table(module_name):
    rows = [" | ".join(row) for row in table_rows(doc_text())]
    in_table = {(module, name) for row in rows for module, name in MENTION.findall(row)}
    missing = [
        f"{module_name}.{function}"
        for function in public_functions(MODULES[module_name])
        if (module_name, function) not in in_table
    ]
    assert not missing, f"docs/cookbook.md's table does not list {missing}"


def test_every_mentioned_cookbook_name_exists():
    mentions = set(MENTION.findall(doc_text()))
    assert len(mentions) > 30
    unknown = sorted(
        f"{module}.{name}" for module, name in mentions if not hasattr(MODULES[module], name)
    )
    assert not unknown, f"docs/cookbook.md names things that do not exist: {unknown}"


def test_every_row_cites_a_test_and_every_cited_test_exists():
    text = doc_text()
    rows = table_rows(text)
    width = len(rows[0])
    assert width == 7
    for row in rows:
        assert len(row) == width, f"row with {len(row)} cells, not {width}: {row[0]}"
        assert TEST_NAME.findall(row[-1]), f"the row {row[0]!r} cites no test"
    cited = set(TEST_NAME.findall(text))
    assert len(cited) > 50
    missing = sorted(cited - defined_tests())
    assert not missing, f"docs/cookbook.md cites tests that do not exist: {missing}"


def test_the_snippets_run():
    """The python blocks run in order in one namespace, as the page says."""
    snippets = re.findall(r"```python\n(.*?)```", doc_text(), flags=re.DOTALL)
    assert len(snippets) >= 4
    namespace: dict = {}
    for k, snippet in enumerate(snippets):
        code = compile(snippet, f"docs/cookbook.md snippet {k + 1}", "exec")
        exec(code, namespace)
    assert namespace["model"].guarantee.max_len is None
    assert namespace["pred_model"].guarantee.max_len == 20
