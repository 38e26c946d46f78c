"""Os notebooks do curso e os seus exercícios, lidos da estrutura de cada notebook.

Nada aqui conhece um exercício pelo nome: tudo sai das células. Num notebook do curso,
cada exercício é, em ordem: o enunciado (texto), a célula de resposta (um ``def`` que
levanta ``NotImplementedError``), a célula de conferência ``solved_N = ex.check_xxx(f)``
e uma célula de texto ``<details><summary>Solução</summary>`` com um bloco ```python. A
célula de importação faz ``ex = checks("<módulo>")``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import nbformat.reader

ROOT = Path(__file__).resolve().parent.parent.parent
NOTEBOOKS_DIR = ROOT / "notebooks"

SOLUTION_RE = re.compile(r"<summary>\s*Solução\s*</summary>.*?```python\n(.*?)```", re.S)
CHECKS_RE = re.compile(r"""\bchecks\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']\s*\)""")
SECTION_RE = re.compile(r"^#{1,3}\s+(?:\d+\.\s*)?Exercícios\b", re.M)
EXERCISE_HEADING_RE = re.compile(r"^#{2,4}\s+Exercício\s+(\d+)\b", re.M)
TOP_HEADING_RE = re.compile(r"^#{1,2}\s+\S", re.M)
PENDING_MARK = "⏳"


@dataclass(frozen=True)
class Exercise:
    """Um exercício: número (o N de ``solved_N``), verificador e função pedida."""

    number: int
    check_name: str  # ex.check_xxx
    function_name: str  # o argumento passado à conferência
    answer_index: int  # célula de resposta (índice no notebook do curso)
    check_index: int  # célula de conferência
    solution_index: int  # célula <details> com a solução
    solution: str  # o código da solução de referência
    check_source: str  # a célula de conferência, como está no curso


@dataclass
class CourseNotebook:
    """Um notebook do curso (``stem`` como ``06_mascaras``) e o que a correção precisa dele."""

    stem: str
    path: Path
    nb: Any
    module: str  # tpt.exercises.<module>
    imports_index: int
    section_index: int  # a célula do título "Exercícios"
    exercises: list[Exercise] = field(default_factory=list)

    @property
    def imports_source(self) -> str:
        return self.nb.cells[self.imports_index].source

    def trusted_prelude(self) -> list[str]:
        """O código confiável que roda antes das células do aluno, tirado do curso.

        A célula de importação, a de parâmetros, a do dispositivo e as instruções
        ``import`` das outras células anteriores aos exercícios: o aluno tem os mesmos
        nomes importados que teria rodando o notebook inteiro, sem os treinos da aula.
        """
        cells = self.nb.cells
        prelude = [self.imports_source]
        imports: list[str] = []
        for i, cell in enumerate(cells[: self.section_index]):
            if cell.cell_type != "code" or i == self.imports_index:
                continue
            if "parameters" in cell.metadata.get("tags", []) or "tpt.get_device(" in cell.source:
                prelude.append(cell.source)
                continue
            imports.extend(_import_statements(cell.source))
        if imports:
            prelude.append("\n".join(dict.fromkeys(imports)))
        return prelude


def _python_only(source: str) -> str:
    """O código sem as linhas mágicas do IPython (``%pip``, ``!ls``)."""
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def _import_statements(source: str) -> list[str]:
    try:
        tree = ast.parse(_python_only(source))
    except SyntaxError:
        return []
    return [
        ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
    ]


def check_call(source: str) -> tuple[int, str, str] | None:
    """``solved_N = ex.check_xxx(f)`` -> ``(N, "check_xxx", "f")``; outra coisa -> None."""
    try:
        tree = ast.parse(_python_only(source))
    except SyntaxError:
        return None
    found = None
    for node in tree.body:
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and re.fullmatch(r"solved_\d+", node.targets[0].id)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and isinstance(node.value.func.value, ast.Name)
            and node.value.func.value.id == "ex"
            and node.value.func.attr.startswith("check_")
        ):
            return None
        args = node.value.args
        name = args[0].id if args and isinstance(args[0], ast.Name) else ""
        found = (int(node.targets[0].id.split("_")[1]), node.value.func.attr, name)
    return found


def is_check_cell(cell: Any) -> bool:
    """A célula só chama verificadores (``solved_N = ex.check_...(...)``)."""
    return cell.cell_type == "code" and check_call(cell.source) is not None


def defined_names(source: str) -> set[str]:
    """Nomes que uma célula define no nível de cima (``def``, ``class``, atribuições)."""
    try:
        tree = ast.parse(_python_only(source))
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def checks_module(nb: Any) -> str | None:
    """O módulo de ``checks("...")`` da célula de importação, ou None."""
    for cell in nb.cells:
        if cell.cell_type == "code" and "tpt.exercises" in cell.source:
            match = CHECKS_RE.search(cell.source)
            if match:
                return match.group(1)
    return None


def section_start(nb: Any) -> int | None:
    """O índice da célula com o título da seção de exercícios, ou None."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and SECTION_RE.search(cell.source):
            return i
    return None


def section_end(nb: Any, start: int) -> int:
    """Onde a seção de exercícios acaba: o próximo título de nível 1 ou 2 (``## Resumo``)."""
    for i in range(start + 1, len(nb.cells)):
        cell = nb.cells[i]
        if cell.cell_type == "markdown" and TOP_HEADING_RE.search(cell.source):
            if not SECTION_RE.search(cell.source) and not EXERCISE_HEADING_RE.search(cell.source):
                return i
    return len(nb.cells)


def read_json_notebook(text: str) -> Any:
    """Um notebook nbformat 4 de um texto JSON, sem a validação lenta do esquema."""
    nb = nbformat.reader.reads(text)
    if nb.get("nbformat") != 4:
        nb = nbformat.convert(nb, 4)
    return nb


def parse_course_notebook(path: Path) -> CourseNotebook:
    """Lê um notebook do curso e encontra a importação, a seção e os exercícios."""
    nb = read_json_notebook(Path(path).read_text(encoding="utf-8"))
    module = checks_module(nb)
    if module is None:
        raise ValueError(f'{path.name}: nenhuma célula faz `ex = checks("...")`.')
    imports_index = next(
        i for i, c in enumerate(nb.cells) if c.cell_type == "code" and CHECKS_RE.search(c.source)
    )
    start = section_start(nb)
    if start is None:
        raise ValueError(f'{path.name}: não achei o título da seção "Exercícios".')
    exercises = []
    for i, cell in enumerate(nb.cells):
        match = SOLUTION_RE.search(cell.source) if cell.cell_type == "markdown" else None
        if match is None:
            continue
        check_index = next(j for j in range(i - 1, -1, -1) if nb.cells[j].cell_type == "code")
        call = check_call(nb.cells[check_index].source)
        if call is None:
            raise ValueError(
                f"{path.name}: a célula antes da solução {i} não é `solved_N = ex.check_...(f)`."
            )
        answer_index = next(
            j for j in range(check_index - 1, -1, -1) if nb.cells[j].cell_type == "code"
        )
        number, check_name, function_name = call
        exercises.append(
            Exercise(
                number=number,
                check_name=check_name,
                function_name=function_name,
                answer_index=answer_index,
                check_index=check_index,
                solution_index=i,
                solution=match.group(1),
                check_source=nb.cells[check_index].source,
            )
        )
    numbers = [e.number for e in exercises]
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"{path.name}: exercícios com o mesmo número: {numbers}.")
    return CourseNotebook(path.stem, path, nb, module, imports_index, start, exercises)


def load_course(notebooks_dir: Path = NOTEBOOKS_DIR) -> dict[str, CourseNotebook]:
    """Os notebooks ``NN_*.ipynb`` do curso com exercícios, pelo nome (``06_mascaras``)."""
    paths = sorted(Path(notebooks_dir).glob("[0-9][0-9]_*.ipynb"))
    if not paths:
        raise FileNotFoundError(f"nenhum notebook NN_*.ipynb em {notebooks_dir}.")
    course = {}
    for path in paths:
        notebook = parse_course_notebook(path)
        course[notebook.stem] = notebook
    return course


def recognise(nb: Any, course: dict[str, CourseNotebook]) -> str | None:
    """Qual notebook do curso é este (pelo conteúdo, não pelo nome do arquivo), ou None.

    Primeiro ``metadata.tpt.notebook`` (as cópias da turma o trazem); senão o módulo de
    ``checks("...")`` da célula de importação. Um notebook de outro curso não tem nenhum
    dos dois.
    """
    meta = nb.get("metadata", {}).get("tpt", {})
    stem = meta.get("notebook") if isinstance(meta, dict) else None
    if isinstance(stem, str) and stem in course:
        return stem
    module = checks_module(nb)
    for name, notebook in course.items():
        if notebook.module == module:
            return name
    return None
