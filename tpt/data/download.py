"""Baixador OPCIONAL de um texto maior de domínio público (com sha256 e cache).

Ver notebooks/09_geracao.ipynb (parâmetro para treinar com um corpus maior).

O caminho padrão do curso NÃO usa a internet: o corpus embutido (`load_corpus`) e a
tarefa dos números vêm com o pacote. Este módulo existe para quem quer ir além, por
exemplo com um romance de Machado de Assis do Projeto Gutenberg. Três cuidados que links
de dados costumam esquecer:

1. **Integridade**: quem chama informa o sha256 esperado. O arquivo é baixado para um
   arquivo temporário, o hash é conferido e só então ele ganha o nome definitivo. Se não
   conferir, o arquivo é apagado e nada fica no cache.
2. **Cache**: o arquivo fica em `~/.cache/tpt` (ou na pasta da variável de ambiente
   `TPT_CACHE_DIR`, ou em `cache_dir=`). Se já estiver lá com o hash certo, nenhuma
   conexão é feita.
3. **Offline**: sem rede, o erro diz em português o que fazer (inclusive copiar o arquivo
   à mão para o cache).

Não há aqui uma lista de livros com hashes prontos: um checksum só vale se alguém o
conferiu no arquivo de verdade. Baixe uma vez, calcule o hash com `file_sha256` e passe
esse valor em `sha256=` daí em diante. Exemplo:

    from tpt.data import download_text
    caminho = download_text(
        "https://www.gutenberg.org/...txt",  # endereço do arquivo de texto puro
        sha256="...",  # 64 dígitos hexadecimais, conferidos por você
        filename="dom_casmurro.txt",
    )
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from os import PathLike
from pathlib import Path

_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
_USER_AGENT = "tpt (curso Transformers do zero)"
_CHUNK = 1 << 16


def default_cache_dir() -> Path:
    """Pasta do cache: `$TPT_CACHE_DIR` se definida, senão `~/.cache/tpt`."""
    env = os.environ.get("TPT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "tpt"


def file_sha256(path: str | PathLike[str]) -> str:
    """sha256 (64 dígitos hexadecimais, minúsculos) do conteúdo de um arquivo."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _check_arguments(url: str, sha256: str, filename: str | None, timeout: float) -> str:
    """Valida os argumentos e devolve o nome do arquivo no cache."""
    if not isinstance(url, str) or urllib.parse.urlparse(url).scheme not in ("http", "https"):
        raise ValueError(f"url={url!r} deve ser um endereço http:// ou https://")
    if not isinstance(sha256, str) or not _SHA256.match(sha256):
        raise ValueError(
            f"sha256={sha256!r} deve ter 64 dígitos hexadecimais; calcule-o com "
            f"tpt.data.file_sha256(caminho) num arquivo que você conferiu"
        )
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout={timeout!r} deve ser um número de segundos > 0")
    if filename is None:
        filename = urllib.parse.unquote(Path(urllib.parse.urlparse(url).path).name)
        if not filename:
            raise ValueError(f"não consegui tirar um nome de arquivo de url={url!r}; use filename=")
    if not isinstance(filename, str) or filename in (".", "..") or re.search(r"[/\\]", filename):
        raise ValueError(f"filename={filename!r} deve ser um nome simples, sem pastas")
    return filename


def _offline_message(url: str, reason: str, target: Path) -> str:
    return (
        f"Não foi possível baixar {url} ({reason}). Isso não atrapalha o curso: o caminho "
        f"padrão não precisa de internet (o corpus embutido, tpt.data.load_corpus(), e a "
        f"tarefa dos números funcionam offline). Para usar este texto maior, conecte-se à "
        f"internet e rode de novo, ou baixe o arquivo em outra máquina e copie-o para "
        f"{target} (o sha256 será conferido antes do uso)."
    )


def download_text(
    url: str,
    sha256: str,
    *,
    cache_dir: str | PathLike[str] | None = None,
    filename: str | None = None,
    timeout: float = 30,
    verbose: bool = True,
) -> Path:
    """Baixa `url` para o cache, confere o sha256 e devolve o caminho do arquivo.

    - Se o arquivo já está no cache com o hash certo, devolve-o sem usar a rede.
    - Baixa para um arquivo temporário na mesma pasta e só o renomeia depois de
      conferir o hash. Hash diferente: apaga o arquivo e levanta ValueError com o hash
      esperado e o recebido.
    - Sem rede (ou servidor fora do ar, ou erro HTTP): ConnectionError explicando que
      o curso funciona offline e como seguir.

    `cache_dir=None` usa `default_cache_dir()`; `filename=None` usa o último trecho do
    endereço. Só usa a biblioteca padrão (`urllib`).
    """
    filename = _check_arguments(url, sha256, filename, timeout)
    expected = sha256.lower()
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / filename

    if target.is_file():
        if file_sha256(target) == expected:
            if verbose:
                print(f"Usando a cópia em cache: {target}")
            return target
        if verbose:
            print(f"A cópia em cache {target} não confere com o sha256; baixando de novo.")

    if verbose:
        print(f"Baixando {url} para {target} ...")
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    digest = hashlib.sha256()
    handle, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{filename}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(handle, "wb") as out:
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    while chunk := response.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
            except urllib.error.HTTPError as error:
                reason = f"o servidor respondeu HTTP {error.code} {error.reason}"
                raise ConnectionError(_offline_message(url, reason, target)) from error
            except urllib.error.URLError as error:
                reason = f"sem conexão: {error.reason}"
                raise ConnectionError(_offline_message(url, reason, target)) from error
            except (TimeoutError, ConnectionError, http.client.HTTPException) as error:
                reason = f"a conexão falhou: {error!r}"
                raise ConnectionError(_offline_message(url, reason, target)) from error
        received = digest.hexdigest()
        if received != expected:
            target.unlink(missing_ok=True)  # uma cópia antiga errada também sai do cache
            raise ValueError(
                f"o arquivo baixado de {url} não confere: sha256 esperado {expected}, "
                f"recebido {received}. O arquivo foi apagado. Se a fonte mudou o arquivo "
                f"de propósito e você confia nela, confira o novo hash antes de usá-lo."
            )
        os.replace(tmp, target)  # renomeação atômica: ou o arquivo inteiro, ou nada
    finally:
        tmp.unlink(missing_ok=True)
    if verbose:
        print(f"Pronto: {target} ({target.stat().st_size} bytes, sha256 conferido).")
    return target
