"""Os scripts que executam e conferem os notebooks: kernels sem aviso de TCP e a escolha
dos núcleos de CPU de `make test-kernels` (issue 16)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import run_notebooks  # noqa: E402
import test_kernels  # noqa: E402


@pytest.mark.skipif(os.name != "posix", reason="sockets de arquivo (IPC) só existem em POSIX")
def test_notebooks_run_without_the_tcp_warning(tmp_path):
    # Com TCP, o ipykernel avisa "Kernel is running over TCP without encryption…" a
    # cada notebook de `make notebooks`; com IPC, o aviso não existe (e nada vai à rede).
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import sys\nprint('olá', file=sys.stderr)")]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    source = tmp_path / "mini.ipynb"
    nbformat.write(nb, source)
    runner = (
        "import sys, papermill\n"
        f"sys.path.insert(0, {str(ROOT / 'scripts')!r})\n"
        "from run_notebooks import kernel_config\n"
        f"papermill.execute_notebook({str(source)!r}, {str(tmp_path / 'out.ipynb')!r},"
        " kernel_name='python3', progress_bar=False, config=kernel_config())\n"
    )
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    result = subprocess.run(
        [sys.executable, "-c", runner], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "without encryption" not in result.stderr
    assert "olá" in "".join(nbformat.read(tmp_path / "out.ipynb", 4).cells[0].outputs[0].text)
    assert run_notebooks.kernel_config().KernelManager.transport == "ipc"


@pytest.mark.parametrize(
    ("native", "expected"),
    [
        ("AVX512", ["genérico", "genérico-só-aten", "avx2", "avx2-só-aten"]),
        ("AVX2", ["genérico", "genérico-só-aten"]),
        ("DEFAULT", ["genérico"]),
        ("NO AVX", ["genérico"]),
        ("SVE256", ["genérico", "genérico-só-aten"]),
    ],
)
def test_kernel_sets_always_include_another_set_than_the_native_one(native, expected):
    assert test_kernels.kernel_sets(native) == expected


def test_the_mixed_set_changes_only_pytorch_and_leaves_mkl_and_onednn_native():
    """A mistura que mudou uma saída do 02: ATEN_CPU_CAPABILITY=avx2 sozinho."""
    assert test_kernels.KERNEL_SETS["avx2-só-aten"] == {"ATEN_CPU_CAPABILITY": "avx2"}


def test_the_generic_aten_only_set_leaves_mkl_and_onednn_native():
    """A mistura que mudou um veredito do 09: ATEN_CPU_CAPABILITY=default sozinho."""
    assert test_kernels.KERNEL_SETS["genérico-só-aten"] == {"ATEN_CPU_CAPABILITY": "default"}
    env = {**os.environ, **test_kernels.KERNEL_SETS["genérico-só-aten"]}
    assert test_kernels.capability(env) in test_kernels.GENERIC


def test_the_generic_set_really_changes_the_kernels_pytorch_uses():
    env = {**os.environ, **test_kernels.KERNEL_SETS["genérico"]}
    # O torch 2.6 (o piso) chama as rotinas genéricas de "NO AVX"; os mais novos, de "DEFAULT".
    assert test_kernels.capability(env) in {"DEFAULT", "NO AVX"}


def test_unknown_kernel_set_is_refused(capsys):
    assert test_kernels.main(["--sets", "avx9000", "--", "-q"]) == 2
    assert "avx9000" in capsys.readouterr().err


# --- A regravação nunca guarda uma figura velha (issue 31) ---------------------------


def _figure_cell(png: str, seconds: str, tags: list[str] | None = None):
    cell = nbformat.v4.new_code_cell(
        "# NBVAL_IGNORE_OUTPUT\nplt.plot(medidas)\nprint(tempo)", id="figura"
    )
    if tags:
        cell.metadata["tags"] = tags
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text=f"tempo: {seconds} s\n"),
        nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"}),
    ]
    return cell


def _rebuild(old_cell, new_cell):
    from notebook_tools import normalize

    previous = nbformat.v4.new_notebook(cells=[old_cell])
    fresh = nbformat.v4.new_notebook(cells=[new_cell])
    return normalize(fresh, previous).cells[0]


def test_rebuild_refreshes_a_figure_whose_data_changed_in_an_ignored_cell():
    # O texto só difere no tempo (sanitizado), mas a figura mudou: a nova fica.
    cell = _rebuild(_figure_cell("FIGURA-VELHA", "1,5"), _figure_cell("FIGURA-NOVA", "2,7"))
    assert cell.outputs[1]["data"]["image/png"] == "FIGURA-NOVA"
    assert "2,7" in cell.outputs[0]["text"]


def test_rebuild_keeps_the_outputs_when_nothing_but_timings_changed():
    cell = _rebuild(_figure_cell("FIGURA", "1,5"), _figure_cell("FIGURA", "2,7"))
    assert "1,5" in cell.outputs[0]["text"]  # nenhum diff no git


def _table_cell(row: str):
    cell = nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\nprint(tabela)", id="tabela")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=row)]
    return cell


def test_a_timing_table_whose_columns_changed_width_counts_as_the_same_run():
    # Alinhada à direita, a coluna muda de largura com o número (o 04 regravado duas vezes).
    old = _table_cell("b=8 | 486,759 ms |   139,576 ms | 2,72×\n")
    new = _table_cell("b=8 |  106,281 ms |    39,091 ms | 2,69×\n")
    assert _rebuild(old, new).outputs[0]["text"] == old.outputs[0]["text"]
    # Uma palavra a mais não é alinhamento: a execução nova fica.
    changed = _table_cell("b=8 | 106,281 ms | 39,091 ms | 2,69× (outra)\n")
    assert "outra" in _rebuild(old, changed).outputs[0]["text"]


def _drawn_by_its_code(cell):
    from notebook_tools import FIGURE_SOURCE_KEY, source_digest

    cell.metadata[FIGURE_SOURCE_KEY] = source_digest(cell)
    return cell


def test_a_timing_figure_keeps_its_previous_image_when_the_text_matches():
    tags = ["grafico-de-tempos"]
    old = _drawn_by_its_code(_figure_cell("TEMPOS-VELHOS", "1,5", tags))
    cell = _rebuild(old, _figure_cell("TEMPOS-NOVOS", "2,7", tags))
    assert cell.outputs[1]["data"]["image/png"] == "TEMPOS-VELHOS"
    assert cell.metadata["fonte_da_figura"] == old.metadata["fonte_da_figura"]


def test_a_timing_figure_drawn_by_older_code_is_refreshed():
    # O código da célula mudou (e foi salvo) antes da regravação: a imagem guardada veio do
    # código antigo, então a nova fica, mesmo com a tag e o texto sanitizado igual.
    tags = ["grafico-de-tempos"]
    old = _drawn_by_its_code(_figure_cell("TEMPOS-DO-CODIGO-ANTIGO", "1,5", tags))
    old.source = old.source.replace("plt.plot", "plt.semilogy")
    new = _figure_cell("TEMPOS-NOVOS", "2,7", tags)
    new.source = old.source
    cell = _rebuild(old, new)
    assert cell.outputs[1]["data"]["image/png"] == "TEMPOS-NOVOS"


def test_timing_figure_tag_is_used_only_on_cells_ignored_by_nbval():
    from notebook_tools import course_notebooks, is_timing_figure, is_volatile

    wrong = [
        (path.name, index)
        for path in course_notebooks()
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells)
        if is_timing_figure(cell) and not is_volatile(cell)
    ]
    assert not wrong, f"tag grafico-de-tempos em célula comparada pelo nbval: {wrong}"


# --- Texto e figura sempre da mesma execução (issue 38) -------------------------------


def _print_cell(seconds: str, cell_id: str = "tabela"):
    cell = nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\nprint(tempos)", id=cell_id)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"cache: {seconds} s\n")]
    return cell


def _rebuild_notebook(old_cells, new_cells):
    from notebook_tools import normalize

    previous = nbformat.v4.new_notebook(cells=old_cells)
    fresh = nbformat.v4.new_notebook(cells=new_cells)
    return normalize(fresh, previous).cells


def test_a_table_printed_in_one_cell_and_drawn_in_another_come_from_the_same_run():
    # O caso do 09 (c63 imprime os tempos, c64 os desenha): a figura mudou de verdade, então a
    # tabela, que só mudou nos tempos (sanitizados), também vem da execução nova.
    cells = _rebuild_notebook(
        [_print_cell("1,5"), _figure_cell("FIGURA-VELHA", "1,5")],
        [_print_cell("2,7"), _figure_cell("FIGURA-NOVA", "2,7")],
    )
    assert "2,7" in cells[0].outputs[0]["text"]
    assert cells[1].outputs[1]["data"]["image/png"] == "FIGURA-NOVA"


def test_a_real_change_anywhere_refreshes_every_volatile_output():
    # Um número conferido mudou numa célula: as saídas de tempos, em outras células, não ficam
    # da execução anterior.
    checked_old = nbformat.v4.new_code_cell("print(acerto)", id="acerto")
    checked_old.outputs = [nbformat.v4.new_output("stream", name="stdout", text="acerto: 0,90\n")]
    checked_new = copy.deepcopy(checked_old)
    checked_new.outputs[0]["text"] = "acerto: 0,91\n"
    cells = _rebuild_notebook(
        [_print_cell("1,5"), checked_old], [_print_cell("2,7"), checked_new]
    )
    assert "2,7" in cells[0].outputs[0]["text"]
    assert "0,91" in cells[1].outputs[0]["text"]


def test_an_edited_cell_refreshes_the_whole_notebook():
    new_print = _print_cell("2,7", "b")
    new_print.source += "\nprint('mais uma linha')"
    cells = _rebuild_notebook(
        [_print_cell("1,5", "a"), _print_cell("1,5", "b")],
        [_print_cell("2,7", "a"), new_print],
    )
    assert all("2,7" in c.outputs[0]["text"] for c in cells)


def test_equivalent_runs_keep_every_previous_output_and_markdown_edits_do_not_matter():
    old = [nbformat.v4.new_markdown_cell("texto antigo"), _print_cell("1,5"),
           _figure_cell("FIGURA", "1,5")]
    new = [nbformat.v4.new_markdown_cell("texto novo"), _print_cell("2,7"),
           _figure_cell("FIGURA", "2,7")]
    cells = _rebuild_notebook(old, new)
    assert cells[0].source == "texto novo"
    assert "1,5" in cells[1].outputs[0]["text"] and "1,5" in cells[2].outputs[0]["text"]


def test_a_rebuild_of_a_real_notebook_with_a_changed_timing_keeps_nothing_from_the_old_run():
    from notebook_tools import course_notebooks, normalize

    path = next(p for p in course_notebooks() if p.name.startswith("09"))
    stored = nbformat.read(path, as_version=4)
    fresh = copy.deepcopy(stored)
    volatile = [c for c in fresh.cells if c.cell_type == "code" and c.outputs]
    volatile[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="mudou\n")]
    expected = [c.outputs for c in copy.deepcopy(fresh).cells if c.cell_type == "code"]
    rebuilt = normalize(fresh, stored)
    assert [c.outputs for c in rebuilt.cells if c.cell_type == "code"] == expected
    # E a mesma execução de novo: nada muda.
    assert normalize(copy.deepcopy(stored), stored).cells == stored.cells


# --- O script de sementes (issue 38) ---------------------------------------------------


def _verdict_notebook(lines_by_cell: dict[str, list[str]]):
    cells = []
    for cell_id, lines in lines_by_cell.items():
        cell = nbformat.v4.new_code_cell("print(...)", id=cell_id)
        cell.outputs = [
            nbformat.v4.new_output("stream", name="stdout", text="".join(f"{ln}\n" for ln in lines))
        ]
        cells.append(cell)
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# título"), *cells])


def test_seed_check_compares_the_verdicts_not_the_numbers_beside_them():
    import seed_check

    stored = _verdict_notebook({
        "a": ["acerto 0,93 acima de 0,8: True", "texto sem veredito 0,5"],
        "b": ["x: True | y: False"],
    })
    same = _verdict_notebook({"a": ["acerto 0,97 acima de 0,8: True"], "b": ["x: True | y: False"]})
    injected = nbformat.v4.new_code_cell("seed = 1", id="injected-parameters")
    injected.metadata["tags"] = ["injected-parameters"]
    injected.outputs = [nbformat.v4.new_output("stream", name="stdout", text="False\n")]
    same.cells.insert(1, injected)  # a célula que o papermill injeta não conta
    assert seed_check.compare(stored, same) == (2, [])

    flipped = _verdict_notebook({"a": ["acerto 0,78 acima de 0,8: False"], "b": ["x: True"]})
    total, changes = seed_check.compare(stored, flipped)
    assert total == 2
    assert [(c.cell, c.stored, c.new) for c in changes] == [
        (1, "acerto 0,93 acima de 0,8: True", "acerto 0,78 acima de 0,8: False"),
        (2, "x: True | y: False", "x: True"),
    ]


def test_seed_check_reports_missing_and_extra_verdict_lines():
    import seed_check

    stored = _verdict_notebook({"a": ["um: True", "dois: True"]})
    fewer = _verdict_notebook({"a": ["um: True"], "c": ["novo: True"]})
    _, changes = seed_check.compare(stored, fewer)
    assert [(c.stored, c.new) for c in changes] == [("dois: True", None), (None, "novo: True")]
    assert "2 veredito(s) mudaram" in seed_check.report(
        [seed_check.Run("x.ipynb", 1, verdicts=2, changes=changes)]
    )


def test_seed_check_refuses_seed_as_a_plain_parameter(capsys):
    import seed_check

    assert seed_check.main(["06_mascaras.ipynb", "-p", "seed", "3"]) == 2
    assert "--seeds" in capsys.readouterr().err
    assert seed_check.main(["99_nada.ipynb"]) == 2
