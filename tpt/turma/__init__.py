"""Kit do instrutor: cópias para a turma, correção de entregas e exportação para o nbgrader.

Módulos (um assunto cada):

- :mod:`tpt.turma.course`: os notebooks do curso e seus exercícios, lidos das células;
- :mod:`tpt.turma.copies`: as cópias dos alunos, sem as soluções;
- :mod:`tpt.turma.nbgrader`: a árvore ``source/`` do nbgrader;
- :mod:`tpt.turma.submissions`: as entregas, reconhecidas pelo conteúdo;
- :mod:`tpt.turma.sandbox`: um processo por notebook, com limites de tempo e memória;
- :mod:`tpt.turma.child`: o que roda dentro desse processo;
- :mod:`tpt.turma.integrity`: o retrato das conferências e a detecção de adulteração;
- :mod:`tpt.turma.grading`: os vereditos de cada exercício;
- :mod:`tpt.turma.report`: ``notas.csv``, ``resumo.csv`` e a página de cada aluno.

Linha de comando: ``python -m tpt.turma --help``.
"""
