"""Versão do pacote e a checagem que cada notebook faz logo no início.

O problema mais comum em cursos com pacote de apoio é o notebook e o pacote andarem
separados ("module 'tpt' has no attribute ..."). Cada notebook declara a versão do
`tpt` para a qual foi escrito e chama `check_version` no começo.
"""

from __future__ import annotations

__version__ = "0.2.0"

# Endereço do repositório do curso. É o ÚNICO lugar onde ele é escrito no pacote;
# `make fork REPO=...` (scripts/course_repo.py) reescreve este valor, os selos
# "Abrir no Colab" e as células de instalação dos notebooks.
REPOSITORY = "https://github.com/transformers-do-zero/curso"


def _parse(version: str) -> tuple[int, ...]:
    parts = version.split("+")[0].split(".")
    try:
        return tuple(int(p) for p in parts if p != "")
    except ValueError:
        raise ValueError(
            f"versão inválida: {version!r}; esperava algo como '0.1' ou '0.1.0'"
        ) from None


def check_version(expected: str, installed: str | None = None) -> str:
    """Confere se o `tpt` instalado serve para o notebook escrito para `expected`.

    Compara major.minor. Se o instalado for MAIS ANTIGO, levanta RuntimeError dizendo
    como atualizar; se for mais NOVO, só avisa (o notebook deve funcionar, mas pode
    haver diferenças nas saídas). Devolve a mensagem exibida ('' quando tudo bate).
    """
    installed = __version__ if installed is None else installed
    want, have = _parse(expected)[:2], _parse(installed)[:2]
    if have == want:
        return ""
    how = (
        "No Colab: Ambiente de execução > Reiniciar sessão e rode de novo a primeira célula. "
        "Localmente: `git pull` na pasta do curso e `make notebooks` (ou "
        "`pip install -e .` no seu ambiente)."
    )
    if have < want:
        raise RuntimeError(
            f"Este notebook foi escrito para o tpt {expected}, mas o instalado é o "
            f"{installed}, mais antigo: faltarão funções usadas aqui. {how}"
        )
    message = (
        f"Aviso: este notebook foi escrito para o tpt {expected} e o instalado é o "
        f"{installed}, mais novo. Deve funcionar, mas saídas podem diferir das "
        f"guardadas no notebook."
    )
    print(message)
    return message
