"""Os scripts que executam e conferem os notebooks: kernels sem aviso de TCP e a escolha
dos núcleos de CPU de `make test-kernels` (issue 16)."""

from __future__ import annotations

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
        ("AVX512", ["genérico", "avx2", "avx2-só-aten"]),
        ("AVX2", ["genérico"]),
        ("DEFAULT", ["genérico"]),
        ("SVE256", ["genérico"]),
    ],
)
def test_kernel_sets_always_include_another_set_than_the_native_one(native, expected):
    assert test_kernels.kernel_sets(native) == expected


def test_the_mixed_set_changes_only_pytorch_and_leaves_mkl_and_onednn_native():
    """A mistura que mudou uma saída do 02: ATEN_CPU_CAPABILITY=avx2 sozinho."""
    assert test_kernels.KERNEL_SETS["avx2-só-aten"] == {"ATEN_CPU_CAPABILITY": "avx2"}


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


def test_a_timing_figure_keeps_its_previous_image_when_the_text_matches():
    tags = ["grafico-de-tempos"]
    cell = _rebuild(
        _figure_cell("TEMPOS-VELHOS", "1,5", tags), _figure_cell("TEMPOS-NOVOS", "2,7", tags)
    )
    assert cell.outputs[1]["data"]["image/png"] == "TEMPOS-VELHOS"


def test_timing_figure_tag_is_used_only_on_cells_ignored_by_nbval():
    from notebook_tools import course_notebooks, is_timing_figure, is_volatile

    wrong = [
        (path.name, index)
        for path in course_notebooks()
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells)
        if is_timing_figure(cell) and not is_volatile(cell)
    ]
    assert not wrong, f"tag grafico-de-tempos em célula comparada pelo nbval: {wrong}"
