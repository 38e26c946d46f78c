"""O arco 09 -> 11, 12: o 11 exporta o GPT de caracteres que o 09 treina, e o 12 o ajusta.

Os notebooks rodam cada um por si (o nbval os roda em paralelo, em qualquer ordem), então
o 11 e o 12 não leem nada que o 09 gravou: eles refazem o mesmo treino. Este teste lê as células dos
dois notebooks e falha se a receita divergir em qualquer peça que muda os pesos
treinados:

- os valores padrão da célula de parâmetros usados no treino (``seed``, ``block_size``,
  ``batch_size``, ``train_steps``);
- os dados: ``tpt.corpus_splits(...)`` e ``tpt.CharTokenizer.fit(...)``;
- a semente logo antes do modelo: ``tpt.seed_everything(seed)``, depois só
  ``config = tpt.GPTConfig(...)``, depois ``model = tpt.GPT(config)``;
- os argumentos do ``tpt.GPTConfig(vocab_size=tokenizer.vocab_size, ...)``;
- os lotes ``batches = tpt.lm_batches(train_ids, ...)`` e os argumentos do
  ``tpt.train(model, batches, ...)`` (menos ``eval_fn``, ``eval_every`` e ``progress``,
  que não mudam os pesos).

Um nome da célula de parâmetros (``max_len=block_size``) é comparado pelo valor padrão;
o resto, pelo texto da expressão.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = {
    "09": ROOT / "notebooks" / "09_geracao.ipynb",
    "11": ROOT / "notebooks" / "11_do_tpt_ao_hugging_face.ipynb",
    "12": ROOT / "notebooks" / "12_ajuste_fino.ipynb",
}
PARAMETERS = ("seed", "block_size", "batch_size", "train_steps")
NOT_TRAINING = {"eval_fn", "eval_every", "progress"}


def _code_cells(path: Path) -> list[nbformat.NotebookNode]:
    nb = nbformat.read(path, as_version=4)
    return [c for c in nb.cells if c.cell_type == "code"]


def _parse(source: str) -> ast.Module:
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return ast.parse("\n".join(lines))


def _parameters(path: Path) -> dict:
    cell = next(c for c in _code_cells(path) if "parameters" in c.metadata.get("tags", []))
    values: dict = {}
    exec(compile(_parse(cell.source), str(path), "exec"), {}, values)  # só atribuições
    return values


def _is_call(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node.func) == name


def _calls_in(node: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(node) if _is_call(n, name)]


def _value(node: ast.AST, params: dict) -> object:
    if isinstance(node, ast.Name) and node.id in params:
        return ("parâmetro", params[node.id])
    return ast.unparse(node)


def _signature(call: ast.Call, params: dict, skip: set[str] = frozenset()) -> dict:
    out = {f"arg{i}": _value(a, params) for i, a in enumerate(call.args)}
    out.update({k.arg: _value(k.value, params) for k in call.keywords if k.arg not in skip})
    return out


def _recipe(path: Path) -> dict:
    """A receita de treino de um notebook, lida das suas células de código."""
    params = _parameters(path)
    trees = [_parse(c.source) for c in _code_cells(path)]
    recipe: dict = {"parâmetros": {name: params.get(name) for name in PARAMETERS}}
    for name in ("tpt.corpus_splits", "tpt.CharTokenizer.fit"):
        calls = [call for tree in trees for call in _calls_in(tree, name)]
        assert calls, f"{path.name}: não achei {name}(...)"
        recipe[name] = _signature(calls[0], params)
    model_cells = [
        tree
        for tree in trees
        for stmt in tree.body
        if isinstance(stmt, ast.Assign)
        and ast.unparse(stmt.targets[0]) == "model"
        and _calls_in(stmt.value, "tpt.GPT")
        and ast.unparse(_calls_in(stmt.value, "tpt.GPT")[0].args[0]) == "config"
    ]
    assert model_cells, f"{path.name}: não achei model = tpt.GPT(config)"
    body = model_cells[0].body
    at = next(
        i for i, s in enumerate(body)
        if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "model"
    )
    before = [ast.unparse(s) for s in body[:at]]
    recipe["antes do modelo"] = [
        "tpt.seed_everything(seed)" if s == "tpt.seed_everything(seed)" else
        ("config = tpt.GPTConfig(...)" if s.startswith("config = tpt.GPTConfig(") else s)
        for s in before
    ][-2:]
    config = body[at - 1]
    assert isinstance(config, ast.Assign) and _is_call(config.value, "tpt.GPTConfig"), (
        f"{path.name}: a linha antes de model = tpt.GPT(config) deve ser "
        "config = tpt.GPTConfig(...)"
    )
    recipe["tpt.GPTConfig"] = _signature(config.value, params)
    batches = [
        stmt.value
        for tree in trees
        for stmt in tree.body
        if isinstance(stmt, ast.Assign)
        and ast.unparse(stmt.targets[0]) == "batches"
        and _is_call(stmt.value, "tpt.lm_batches")
    ]
    assert batches, f"{path.name}: não achei batches = tpt.lm_batches(...)"
    recipe["tpt.lm_batches"] = _signature(batches[0], params)
    trains = [
        call
        for tree in trees
        for call in _calls_in(tree, "tpt.train")
        if [ast.unparse(a) for a in call.args[:2]] == ["model", "batches"]
    ]
    assert trains, f"{path.name}: não achei tpt.train(model, batches, ...)"
    recipe["tpt.train"] = _signature(trains[0], params, NOT_TRAINING)
    return recipe


@pytest.fixture(scope="module")
def recipes() -> dict[str, dict]:
    return {name: _recipe(path) for name, path in NOTEBOOKS.items()}


RECIPE_PARTS = [
    "parâmetros",
    "tpt.corpus_splits",
    "tpt.CharTokenizer.fit",
    "antes do modelo",
    "tpt.GPTConfig",
    "tpt.lm_batches",
    "tpt.train",
]
# O 11 exporta o modelo que o 09 treina; o 12 o ajusta.
USES = {"11": "exporta", "12": "ajusta"}


@pytest.mark.parametrize("other", sorted(USES))
@pytest.mark.parametrize("part", RECIPE_PARTS)
def test_notebooks_11_and_12_train_exactly_the_model_of_notebook_09(recipes, part, other):
    nine, theirs = recipes["09"][part], recipes[other][part]
    assert nine == theirs, (
        f"a receita do GPT de caracteres diverge entre os notebooks 09 e {other} em {part}:\n"
        f"  09: {nine}\n  {other}: {theirs}\n"
        f"O {other} {USES[other]} o modelo que o 09 treina: mude os dois juntos."
    )


def test_the_recipe_is_a_llama(recipes):
    """A receita comum tem equivalente no transformers (o 11 a exporta como LlamaForCausalLM)."""
    config = recipes["11"]["tpt.GPTConfig"]
    assert config["positional"] == "'rope'" and config["norm"] == "'rmsnorm'"
    assert config["activation"] == "'swiglu'" and config["bias"] == "False"
    assert recipes["11"]["antes do modelo"] == [
        "tpt.seed_everything(seed)",
        "config = tpt.GPTConfig(...)",
    ]


