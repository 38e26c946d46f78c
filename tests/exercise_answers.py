"""Auxiliares comuns aos testes das conferências (tests/test_exercises_*.py).

Cada teste passa uma resposta (certa ou errada) por uma conferência e lê o que ela
imprimiu: ✅, ❌ com a explicação, ou ⏳ (pendente).
"""

from __future__ import annotations


def stub(*args, **kwargs):
    """A célula do aluno ainda não resolvida."""
    raise NotImplementedError("Escreva sua solução aqui")


def run(check, answer, capsys) -> tuple[bool, str]:
    """``(veredito, texto impresso)`` da conferência ``check`` para ``answer``."""
    ok = check(answer)
    return ok, capsys.readouterr().out


def rejected(check, answer, capsys, *fragments: str) -> str:
    """A conferência recusa ``answer`` (❌) e a mensagem contém cada um dos ``fragments``."""
    assert check(answer) is False
    out = capsys.readouterr().out
    assert "❌" in out, out
    for fragment in fragments:
        assert fragment in out, (fragment, out)
    return out


def accepted(check, answer, capsys) -> None:
    """A conferência aceita ``answer`` (✅)."""
    result = check(answer)
    out = capsys.readouterr().out
    assert result is True and "✅" in out, out
