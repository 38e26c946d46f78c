"""Testes de tpt.data.download com um servidor HTTP local (nenhum acesso à internet)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import socket
import threading
from pathlib import Path

import pytest

from tpt.data.download import default_cache_dir, download_text, file_sha256

CONTENT = "Capítulo I\n\nUma noite destas, vindo da cidade, encontrei um rapaz.\n".encode()
SHA = hashlib.sha256(CONTENT).hexdigest()


class _Server:
    """Servidor HTTP em 127.0.0.1 (porta livre qualquer) numa thread; conta os pedidos."""

    def __init__(self, root: Path) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - nome exigido por BaseHTTPRequestHandler
                outer.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args):  # silencia o log no stderr dos testes
                pass

        handler = functools.partial(Handler, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.httpd.server_address[1]
        self.closed = False
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "servidor"
    root.mkdir()
    (root / "livro.txt").write_bytes(CONTENT)
    srv = _Server(root)
    yield srv
    srv.close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("TPT_CACHE_DIR", str(folder))
    return folder


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_download_then_cache_hit(server, cache):
    path = download_text(server.url("livro.txt"), SHA, verbose=False)
    assert path == cache / "livro.txt"
    assert path.read_bytes() == CONTENT
    assert file_sha256(path) == SHA
    assert server.requests == ["/livro.txt"]
    # Segunda chamada: o arquivo está no cache com o hash certo -> nenhum pedido novo.
    again = download_text(server.url("livro.txt"), SHA.upper(), verbose=False)
    assert again == path and server.requests == ["/livro.txt"]
    # Nem precisa do servidor: desligado, o cache continua servindo.
    server.close()
    assert download_text(server.url("livro.txt"), SHA, verbose=False) == path
    assert _leftovers(cache) == ["livro.txt"]  # nenhum .part esquecido


def test_explicit_cache_dir_and_filename(server, tmp_path, capsys):
    folder = tmp_path / "outra" / "pasta"
    path = download_text(server.url("livro.txt"), SHA, cache_dir=folder, filename="dom.txt")
    assert path == folder / "dom.txt" and path.read_bytes() == CONTENT
    out = capsys.readouterr().out
    assert "Baixando" in out and "sha256 conferido" in out


def test_wrong_checksum_is_rejected_and_deleted(server, cache):
    wrong = "0" * 64
    with pytest.raises(ValueError, match=rf"sha256 esperado {wrong}, recebido {SHA}.*apagado"):
        download_text(server.url("livro.txt"), wrong, verbose=False)
    assert server.requests == ["/livro.txt"]  # baixou de fato...
    assert _leftovers(cache) == []  # ...e não sobrou nada: nem o arquivo, nem o temporário


def test_corrupted_cache_is_downloaded_again(server, cache):
    cache.mkdir()
    (cache / "livro.txt").write_bytes(b"arquivo truncado")
    path = download_text(server.url("livro.txt"), SHA, verbose=False)
    assert path.read_bytes() == CONTENT and server.requests == ["/livro.txt"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # ao sair do with, ninguém escuta nesta porta


def test_unreachable_url_gives_portuguese_connection_error(cache):
    url = f"http://127.0.0.1:{_closed_port()}/livro.txt"
    with pytest.raises(ConnectionError, match=r"Não foi possível baixar .*não precisa de internet"):
        download_text(url, SHA, timeout=5, verbose=False)
    with pytest.raises(ConnectionError, match=r"load_corpus\(\).*copie-o para .*livro.txt"):
        download_text(url, SHA, timeout=5, verbose=False)
    assert _leftovers(cache) == []


def test_http_error_gives_connection_error(server, cache):
    with pytest.raises(ConnectionError, match=r"HTTP 404"):
        download_text(server.url("nao_existe.txt"), SHA, verbose=False)
    assert _leftovers(cache) == []


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(url="ftp://exemplo/x.txt", sha256=SHA), r"url='ftp://exemplo/x.txt' .*http"),
        (dict(url="http://127.0.0.1/x.txt", sha256="abc"), r"sha256='abc' deve ter 64"),
        (dict(url="http://127.0.0.1/x.txt", sha256=None), r"sha256=None"),
        (dict(url="http://127.0.0.1/", sha256=SHA), r"nome de arquivo.*filename="),
        (
            dict(url="http://127.0.0.1/x.txt", sha256=SHA, filename="../fora.txt"),
            r"filename='../fora.txt' deve ser um nome simples",
        ),
        (dict(url="http://127.0.0.1/x.txt", sha256=SHA, timeout=0), r"timeout=0"),
    ],
)
def test_bad_arguments(kwargs, pattern, cache):
    with pytest.raises(ValueError, match=pattern):
        download_text(**kwargs, verbose=False)
    assert _leftovers(cache) == []  # validação acontece antes de tocar no disco


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TPT_CACHE_DIR", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x"
    monkeypatch.delenv("TPT_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / ".cache" / "tpt"
