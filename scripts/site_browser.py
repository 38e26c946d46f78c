"""O site do curso num navegador de verdade: Chromium sem janela, comandado pelo protocolo
DevTools (só a biblioteca padrão e o websocket-client, que o Jupyter já instala).

    python scripts/site_browser.py [_site] [PASTA_DAS_CAPTURAS]     # = make site-screenshots

Serve o site em 127.0.0.1 (porta livre), abre a página inicial, uma página de notebook
por parte do curso, o glossário e uma busca, e grava capturas de tela (PNG) em
.cache/site/capturas/ (fora do git). tests/test_site_browser.py usa as mesmas funções
para conferir o que uma pessoa veria: título, fórmulas desenhadas pelo MathJax, mapas
de calor carregados, a caixa de busca.

Precisa do Chromium do Debian (`apt-get install chromium`, em /usr/bin/chromium) ou de
outro Chromium/Chrome indicado em $CHROMIUM.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Sem essas opções o Chromium tenta falar com os serviços do Google a cada início.
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--hide-scrollbars", "--mute-audio",
    "--remote-debugging-port=0", "--remote-allow-origins=*",
]
WIDTH, HEIGHT = 1280, 900


def chromium() -> str | None:
    """O executável do Chromium: $CHROMIUM, ou o do Debian, ou outro no PATH."""
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # sem uma linha por requisição
        pass


@contextlib.contextmanager
def serve(site: Path):
    """Serve a pasta `site` em http://127.0.0.1:<porta livre>/ enquanto o bloco roda."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class Browser:
    """Um Chromium sem janela com uma aba, comandada pelo protocolo DevTools."""

    def __init__(self, executable: str, timeout: float = 90.0):
        import websocket  # websocket-client (dependência do jupyter-server)

        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="tpt-chromium-")
        self._proc = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={self._profile}",
             f"--window-size={WIDTH},{HEIGHT}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("o Chromium não abriu a porta do DevTools")
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            pages = [t for t in json.load(r) if t["type"] == "page"]
        self._ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"],
                                               timeout=timeout)
        self._id = 0
        self._events: list[dict] = []
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False)

    def send(self, method: str, **params) -> dict:
        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._events.append(message)

    def _wait_event(self, name: str) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            for event in self._events:
                if event.get("method") == name:
                    self._events.clear()
                    return
            self._events.append(json.loads(self._ws.recv()))
        raise TimeoutError(f"esperei {self.timeout} s por {name}")

    def open(self, url: str) -> None:
        """Abre `url` e espera a página carregar e o MathJax terminar de desenhar."""
        self._events.clear()
        self.send("Page.navigate", url=url)
        self._wait_event("Page.loadEventFired")
        self.evaluate(WAIT_FOR_MATH_JS)

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression,
                           awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"erro no JavaScript: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ws.close()
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        shutil.rmtree(self._profile, ignore_errors=True)


# Espera (até 60 s) o MathJax desenhar todas as fórmulas da página: cada elemento
# "math notranslate" do Sphinx ganha um <script type="math/tex"> quando é processado.
WAIT_FOR_MATH_JS = """new Promise(ok => { const start = Date.now(); (function poll() {
  const math = [...document.querySelectorAll('.math.notranslate')];
  const done = math.every(m => m.querySelector('script[type^="math/tex"]'));
  if ((done && (!window.MathJax || !MathJax.Hub || MathJax.Hub.queue.pending === 0))
      || Date.now() - start > 60000) ok(done); else setTimeout(poll, 200); })(); })"""

# O que uma pessoa vê numa página, lido do DOM depois de desenhada.
FACTS_JS = """(() => {
  const imgs = [...document.querySelectorAll('article img')].map(i => ({
    src: i.getAttribute('src'), complete: i.complete,
    width: i.naturalWidth, height: i.naturalHeight,
    shown: i.getBoundingClientRect().width,
    output: !!i.closest('.cell_output')}));
  const colab = document.querySelector('.tpt-links a.tpt-colab');
  const download = document.querySelector('.tpt-links a.tpt-download');
  const search = document.querySelector(
    'form.bd-search input[name="q"], input[type="search"], button.search-button__button');
  return {
    title: document.title,
    h1: (() => { const h = document.querySelector('article h1'); if (!h) return '';
      const c = h.cloneNode(true); c.querySelectorAll('.headerlink').forEach(a => a.remove());
      return c.textContent.trim(); })(),
    equations: document.querySelectorAll('span.MathJax, .MathJax_CHTML, mjx-container').length,
    equation_errors: document.querySelectorAll('.MathJax_Error, merror').length,
    raw_tex: (document.querySelector('article') || document.body).innerText.includes('\\\\frac'),
    images: imgs,
    colab: colab ? colab.href : null,
    download: download ? download.href : null,
    search_box: !!search,
    sidebar: [...document.querySelectorAll('.bd-sidebar-primary nav a')]
      .map(a => a.textContent.trim()),
    next: (document.querySelector('a.right-next') || {}).href || null,
    prev: (document.querySelector('a.left-prev') || {}).href || null,
    search_results: document.querySelectorAll('#search-results li').length,
  };
})()"""


def page_facts(browser: Browser) -> dict:
    return browser.evaluate(FACTS_JS)


def scroll_to_first_figure(browser: Browser) -> bool:
    """Rola até a primeira figura de saída (um mapa de calor, em geral)."""
    return bool(browser.evaluate(
        "(() => { const i = document.querySelector('.cell_output img');"
        " if (!i) return false; i.scrollIntoView({block: 'center'}); return true; })()"
    ))


def pages_to_visit() -> list[tuple[str, str]]:
    """(nome da captura, caminho no site): a inicial, um notebook por parte, o glossário."""
    import build_site

    visits = [("inicio", "index.html")]
    for number, (_, notebooks) in enumerate(build_site.parts(build_site.course_notebooks()), 1):
        visits.append((f"parte{number}_{notebooks[0].stem}", f"notebooks/{notebooks[0].stem}.html"))
    visits.append(("glossario", "glossario.html"))
    visits.append(("busca", "search.html?q=aten%C3%A7%C3%A3o"))
    return visits


def capture(site: Path, out: Path) -> list[dict]:
    """Abre as páginas de pages_to_visit(), grava as capturas em `out` e devolve o visto."""
    executable = chromium()
    if executable is None:
        raise SystemExit("Chromium não encontrado: apt-get install chromium (ou defina $CHROMIUM)")
    out.mkdir(parents=True, exist_ok=True)
    seen = []
    with serve(site) as base:
        browser = Browser(executable)
        try:
            for name, path in pages_to_visit():
                browser.open(base + path)
                if name == "busca":  # a busca do Sphinx preenche os resultados depois
                    browser.evaluate(
                        "new Promise(ok => { const t = Date.now(); (function w() {"
                        " const s = document.querySelector('.search-summary');"
                        " if ((s && s.textContent.trim()) || Date.now() - t > 20000) ok(true);"
                        " else setTimeout(w, 100); })(); })"
                    )
                facts = page_facts(browser)
                browser.screenshot(out / f"{name}.png")
                if scroll_to_first_figure(browser):
                    browser.screenshot(out / f"{name}_figura.png")
                seen.append({"name": name, "path": path, **facts})
        finally:
            browser.close()
    return seen


def main(argv: list[str]) -> int:
    site = Path(argv[0]) if argv else ROOT / "_site"
    out = Path(argv[1]) if len(argv) > 1 else ROOT / ".cache" / "site" / "capturas"
    if not (site / "index.html").exists():
        print(f"{site}/index.html não existe: rode `make site` antes", file=sys.stderr)
        return 1
    for page in capture(site, out):
        figures = [i for i in page["images"] if i["output"]]
        loaded = sum(1 for i in figures if i["complete"] and i["width"] > 0)
        print(f"{page['name']}: título {page['title']!r}, {page['equations']} fórmulas, "
              f"{loaded}/{len(figures)} figuras carregadas, busca: {page['search_box']}")
    print(f"capturas em {out}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
