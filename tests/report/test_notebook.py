"""The tutorial's notebook maker: prose to Markdown cells, doctest examples to code cells."""

from __future__ import annotations

import json

import pytest

from specsim.report.notebook import notebook_json, tutorial_cells

PAGE = """# Title

See [the background](background/x.md) and [a site](https://example.org).

```python
>>> a = 1
>>> for i in range(2):
...     a += i
>>> a
2
>>> b = a + 1
>>> b, a
(3, 2)
```

```toml
key = 1
```

The end.
"""


def test_examples_become_cells_that_end_at_each_shown_result() -> None:
    cells = tutorial_cells(PAGE)
    kinds = [k for k, _ in cells]
    assert kinds == ["markdown", "code", "code", "markdown"]
    assert cells[1][1] == "a = 1\nfor i in range(2):\n    a += i\na"
    assert cells[2][1] == "b = a + 1\nb, a"
    assert "](../background/x.md)" in cells[0][1] and "](https://example.org)" in cells[0][1]
    assert "```toml\nkey = 1\n```" in cells[3][1]  # other blocks stay in the prose


def test_a_python_block_without_prompts_is_refused() -> None:
    with pytest.raises(ValueError, match="without >>> prompts"):
        tutorial_cells("text\n\n```python\nx = 1\n```\n")


def test_notebook_has_no_outputs_and_stable_ids() -> None:
    nb = json.loads(notebook_json(tutorial_cells(PAGE)))
    assert nb["nbformat"] == 4 and nb["metadata"]["kernelspec"]["name"] == "python3"
    assert [c["id"] for c in nb["cells"]] == ["cell-000", "cell-001", "cell-002", "cell-003"]
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert notebook_json(tutorial_cells(PAGE)) == notebook_json(tutorial_cells(PAGE))
