# Transformers do zero — os comandos do curso.
#   make notebooks   executa todos os notebooks em ordem (papermill), regravando as saídas
#   make test        testes do pacote tpt (pytest) + notebooks (nbval)
#   make seeds       os notebooks com outras sementes: lista os vereditos que mudaram
#                    (NB=05_codificacao_posicional.ipynb SEEDS="1 2 3"; padrão: todos, 1 e 2)
#   make test-kernels os notebooks (nbval) com outros núcleos de CPU do PyTorch
#   make test-compat os mesmos testes no Python/torch do Colab, nos pisos e no torch mais novo
#   make lab         abre o JupyterLab
#   make bench       benchmarks contra as implementações do PyTorch
#   make lint        ruff
#   make spellcheck  ortografia (pt-BR) das células de texto, com hunspell
#   make site        o site do curso em _site/ (Sphinx, com as saídas guardadas; nada executa)
#   make test-site   constrói o site e o confere (links, páginas, Colab; Chromium sem janela)
#   make site-screenshots  capturas de tela do site em .cache/site/capturas/
#   make release     confere versão, notebooks e site, e cria a tag v<versão>
#   make turma       cópias dos notebooks para os alunos, sem as soluções, em turma/
#   make corrigir ENTREGAS=pasta  corrige uma turma (uma subpasta por aluno) em correcao/
#                    (NOTEBOOK="06_mascaras": só esses notebooks; padrão: os entregues)
#   make nbgrader    a árvore source/ do nbgrader em nbgrader/
#   make test-nbgrader  a volta completa com o nbgrader 0.9.6 (.cache/nbgrader-venv)
#   make clean       apaga caches e o ambiente virtual
# Cada alvo cria (ou atualiza) o ambiente .venv sozinho: basta ter python3.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.instalado

# Na CI (CI definido) as versões vêm fixadas de constraints-ci.txt, com o torch de CPU.
# Fora dela: `make test PIP_EXTRA="--extra-index-url https://download.pytorch.org/whl/cpu"`
# instala um torch só de CPU; `make test CONSTRAINTS=constraints-ci.txt` força as versões da CI.
CONSTRAINTS ?= $(if $(CI),constraints-ci.txt,)
PIP_EXTRA   ?=
PIP_FLAGS   := $(if $(CONSTRAINTS),-c $(CONSTRAINTS),) $(PIP_EXTRA)

# Estado do Jupyter, IPython e matplotlib vai para .cache/ do projeto, não para $HOME.
CACHE := $(CURDIR)/.cache
ISOLATED_ENV := JUPYTER_CONFIG_DIR=$(CACHE)/jupyter/config \
	JUPYTER_RUNTIME_DIR=$(CACHE)/jupyter/runtime \
	IPYTHONDIR=$(CACHE)/ipython MPLCONFIGDIR=$(CACHE)/matplotlib \
	TPT_CACHE_DIR=$(CACHE)/tpt OMP_NUM_THREADS=1 PYTHONHASHSEED=0 \
	PYDEVD_DISABLE_FILE_VALIDATION=1

# Testes: pytest do pacote + nbval dos notebooks, em 2 processos (um notebook inteiro
# por processo: --dist loadscope).
NBVAL_FLAGS := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg
XDIST ?= -n 2 --dist loadscope

.PHONY: venv test test-tpt test-notebooks test-kernels seeds test-compat notebooks lab bench lint spellcheck clean constraints fork site test-site site-screenshots release release-check turma corrigir nbgrader test-nbgrader

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml constraints-ci.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PIP_FLAGS) -r requirements.txt
	$(PY) -m pip install -q $(PIP_FLAGS) --no-deps -e .
	@touch $(STAMP)

test: $(STAMP)
	$(ISOLATED_ENV) $(PY) -m pytest $(XDIST) tests notebooks $(NBVAL_FLAGS) -q

test-tpt: $(STAMP)
	$(ISOLATED_ENV) $(PY) -m pytest $(XDIST) tests -q

# make test-notebooks NB=06_mascaras.ipynb confere um notebook só.
test-notebooks: $(STAMP)
	$(ISOLATED_ENV) $(PY) -m pytest $(XDIST) $(if $(NB),$(NB:%=notebooks/%),notebooks) $(NBVAL_FLAGS) -q

# As saídas guardadas valem em qualquer CPU: o nbval de novo, com as rotinas genéricas do
# PyTorch, da MKL e da oneDNN, com as genéricas só no PyTorch (MKL e oneDNN nativas) e com AVX2,
# onde a máquina tem AVX-512. Ver scripts/test_kernels.py.
test-kernels: $(STAMP)
	$(ISOLATED_ENV) $(PY) scripts/test_kernels.py -- $(XDIST) $(if $(NB),$(NB:%=notebooks/%),notebooks) $(NBVAL_FLAGS) -q

# Compatibilidade: os mesmos testes em outras versões de Python e torch (Colab, pisos do
# requirements.txt, torch mais novo), cada uma num ambiente próprio em .cache/compat/
# (fora do .venv). make test-compat COMPAT=colab roda só uma. Tabela no README.
test-compat:
	$(ISOLATED_ENV) $(PYTHON) scripts/test_compat.py $(COMPAT) -- $(XDIST) tests notebooks $(NBVAL_FLAGS) -q

notebooks: $(STAMP)
	$(ISOLATED_ENV) $(PY) scripts/run_notebooks.py $(NB)

# Os vereditos (linhas com True/False) valem em qualquer semente? Roda cada notebook com as
# sementes SEEDS e compara com a execução guardada (scripts/seed_check.py). Demora: uma
# execução por notebook e semente; não roda na CI.
SEEDS ?= 1 2
seeds: $(STAMP)
	$(ISOLATED_ENV) $(PY) scripts/seed_check.py $(NB) --seeds $(SEEDS)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks

bench: $(STAMP)
	$(ISOLATED_ENV) $(PY) benchmarks/run.py
	$(ISOLATED_ENV) $(PY) benchmarks/turma.py

lint: $(STAMP)
	$(VENV)/bin/ruff check tpt tests scripts benchmarks site

spellcheck: $(STAMP)
	$(PY) scripts/spellcheck.py

constraints: $(STAMP)
	$(PY) scripts/freeze_constraints.py

# Para quem publica um fork: make fork REPO=https://github.com/voce/seu-fork
fork: $(STAMP)
	$(PY) scripts/course_repo.py set $(REPO)

# O site: Sphinx + myst-nb + sphinx-book-theme (requirements-site.txt) num ambiente à
# parte, .cache/site-venv, que não mexe no .venv dos testes. Constrói a partir das saídas
# guardadas (make notebooks é o único lugar que executa) e não baixa nada.
SITE_DIR   ?= _site
SITE_VENV  := $(CACHE)/site-venv
SITE_PY    := $(SITE_VENV)/bin/python
SITE_STAMP := $(SITE_VENV)/.instalado

$(SITE_STAMP): requirements-site.txt
	@test -x $(SITE_PY) || $(PYTHON) -m venv $(SITE_VENV)
	$(SITE_PY) -m pip install -q -r requirements-site.txt
	@touch $(SITE_STAMP)

site: $(SITE_STAMP)
	$(SITE_PY) scripts/build_site.py $(SITE_DIR)

# Conferências do site construído: páginas, links, imagens, Colab na tag e, no Chromium
# sem janela, título, fórmulas, figuras e busca (tests/test_site*.py).
test-site: site $(STAMP)
	$(ISOLATED_ENV) TPT_SITE=$(abspath $(SITE_DIR)) $(PY) -m pytest tests/test_site.py tests/test_site_browser.py -q

site-screenshots: site $(STAMP)
	$(PY) scripts/site_browser.py $(SITE_DIR) $(CACHE)/site/capturas

# Publicar uma versão: confere tpt/version.py, pyproject, notebooks e site, e cria a tag.
release: site
	$(PYTHON) scripts/release.py $(SITE_DIR)

release-check: site
	$(PYTHON) scripts/release.py $(SITE_DIR) --check

# Kit do instrutor (tpt/turma/; README, "Para instrutores: turma e correção").
# make corrigir ENTREGAS=entregas SAIDA=correcao JOBS=2 TEMPO=300 MEMORIA=4G NOTEBOOK=06_mascaras
# (NOTEBOOK aceita vários nomes separados por espaço; vazio: os notebooks que aparecem nas entregas)
TURMA    ?= turma
ENTREGAS ?= tests/entregas
SAIDA    ?= correcao
JOBS     ?= 2
TEMPO    ?= 300
MEMORIA  ?= 4G
NOTEBOOK ?=
NBGRADER_DIR ?= nbgrader

turma: $(STAMP)
	$(PY) -m tpt.turma copias $(TURMA)

corrigir: $(STAMP)
	$(ISOLATED_ENV) $(PY) -m tpt.turma corrigir $(ENTREGAS) -o $(SAIDA) -j $(JOBS) --tempo $(TEMPO) --memoria $(MEMORIA) $(foreach n,$(NOTEBOOK),--notebook $(n))

nbgrader: $(STAMP)
	$(PY) -m tpt.turma nbgrader $(NBGRADER_DIR)

# O nbgrader num ambiente à parte, .cache/nbgrader-venv (como o do site). O bin/ dele vai
# para o PATH: na primeira chamada o nbgrader roda o executável alembic por subprocesso.
NBGRADER_VENV  := $(CACHE)/nbgrader-venv
NBGRADER_STAMP := $(NBGRADER_VENV)/.instalado

$(NBGRADER_STAMP): requirements-nbgrader.txt
	@test -x $(NBGRADER_VENV)/bin/python || $(PYTHON) -m venv $(NBGRADER_VENV)
	$(NBGRADER_VENV)/bin/python -m pip install -q -r requirements-nbgrader.txt
	@touch $(NBGRADER_STAMP)

test-nbgrader: $(NBGRADER_STAMP) $(STAMP)
	$(ISOLATED_ENV) TPT_NBGRADER_BIN=$(NBGRADER_VENV)/bin $(PY) -m pytest tests/test_turma_nbgrader.py -q -s

clean:
	rm -rf $(VENV) $(CACHE) $(SITE_DIR) .pytest_cache .ruff_cache build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
