"""Kit do instrutor: cópias para a turma, correção de uma turma e exportação para o nbgrader.

    python -m tpt.turma copias [DESTINO]                  # padrão: turma/
    python -m tpt.turma corrigir ENTREGAS [-o SAIDA] [-j N] [--tempo S] [--memoria 4G]
                                  [--notebook 06_mascaras ...]
    python -m tpt.turma nbgrader [DESTINO]                # padrão: nbgrader/

Veja a seção "Para instrutores: turma e correção" do README.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from tpt.numfmt import fmt, fmt_bytes

DEFAULT_SEED = 2026


def parse_memory(text: str) -> int:
    """``"4G"``, ``"512M"``, ``"2.5G"`` ou ``"4"`` (GiB) -> bytes."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    factor = 2**30
    if value and value[-1] in "KMG":
        factor = {"K": 2**10, "M": 2**20, "G": 2**30}[value[-1]]
        value = value[:-1]
    try:
        number = float(value.replace(",", "."))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--memoria {text!r}: esperava um tamanho como 4G ou 512M"
        ) from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"--memoria {text!r}: o limite precisa ser positivo")
    return int(number * factor)


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r}: esperava um número positivo")
        return value

    return parse


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="python -m tpt.turma", description=__doc__.split("\n")[0])
    sub = main.add_subparsers(dest="command", required=True)
    copies = sub.add_parser("copias", help="os notebooks para os alunos, sem as soluções")
    copies.add_argument("destino", nargs="?", default="turma", type=Path)
    grade = sub.add_parser(
        "corrigir", help="corrige uma pasta de entregas (uma subpasta por aluno)"
    )
    grade.add_argument("entregas", type=Path)
    grade.add_argument("-o", "--saida", default=Path("correcao"), type=Path)
    grade.add_argument(
        "-j",
        "--jobs",
        default=1,
        type=_positive(int),
        help="notebooks corrigidos ao mesmo tempo (padrão 1)",
    )
    grade.add_argument(
        "--tempo",
        default=300.0,
        type=_positive(float),
        help="segundos de relógio por notebook (padrão 300)",
    )
    grade.add_argument(
        "--memoria",
        default=4 * 2**30,
        type=parse_memory,
        help="memória por notebook, como 4G ou 512M (padrão 4G)",
    )
    grade.add_argument(
        "--semente",
        default=DEFAULT_SEED,
        type=int,
        help=f"semente dos casos sorteados das conferências (padrão {DEFAULT_SEED})",
    )
    grade.add_argument(
        "--notebook",
        action="append",
        metavar="NOME",
        help="corrige só este notebook (repetível; o nome como em notas.csv, ex.: "
        "06_mascaras). Padrão: os notebooks que aparecem nas entregas",
    )
    grade.add_argument("--sem-barra", action="store_true", help="sem barra de progresso")
    export = sub.add_parser("nbgrader", help="árvore source/ do nbgrader com as soluções marcadas")
    export.add_argument("destino", nargs="?", default="nbgrader", type=Path)
    export.add_argument("--notebook", action="append", help="só este notebook (ex.: 01_tokens)")
    return main


def cmd_copies(args) -> int:
    from tpt.turma.copies import write_copies

    paths = write_copies(args.destino)
    print(f"{fmt(len(paths))} notebooks para a turma em {args.destino}/ (sem as soluções)")
    return 0


def cmd_nbgrader(args) -> int:
    from tpt.turma.nbgrader import write_source_tree

    paths = write_source_tree(args.destino, only=args.notebook)
    print(
        f"{fmt(len(paths) - 1)} tarefas do nbgrader em {args.destino}/source/ "
        f"(e {args.destino}/nbgrader_config.py)"
    )
    return 0


def cmd_grade(args) -> int:
    from tpt.turma.course import load_course
    from tpt.turma.grading import grade_class, graded_notebooks
    from tpt.turma.report import write_all
    from tpt.turma.sandbox import Limits
    from tpt.turma.submissions import collect

    entregas, saida = args.entregas.resolve(), args.saida.resolve()
    if saida == entregas or entregas in saida.parents:
        print(
            f"erro: a saída {args.saida} fica dentro das entregas {args.entregas}; "
            "escolha outra pasta com -o.",
            file=sys.stderr,
        )
        return 2
    if args.semente < 0:
        print(f"erro: --semente {args.semente} é negativa; use um inteiro >= 0.", file=sys.stderr)
        return 2
    course = load_course()
    unknown = [name for name in args.notebook or [] if name not in course]
    if unknown:
        print(
            f"erro: --notebook {unknown[0]!r} não é um notebook do curso; os nomes são: "
            f"{', '.join(course)}.",
            file=sys.stderr,
        )
        return 2
    students = collect(entregas, course)
    if not students:
        print(f"erro: nenhuma subpasta de aluno em {args.entregas}.", file=sys.stderr)
        return 2
    if args.notebook:
        notebooks = [stem for stem in course if stem in args.notebook]
    else:
        notebooks = graded_notebooks(students, course)
        if not notebooks:
            print(
                f"erro: nenhum notebook do curso nas entregas de {args.entregas} "
                '(diga qual com --notebook para dar "não entregue" a todos).',
                file=sys.stderr,
            )
            return 2
    for student in students:
        skipped = [stem for stem in student.submissions if stem not in notebooks]
        for stem in skipped:
            student.notes.append(f"{stem}: entregue, mas fora desta correção (--notebook)")
            del student.submissions[stem]
    limits = Limits(seconds=args.tempo, memory=args.memoria, seed=args.semente)
    start = time.monotonic()
    rows = grade_class(
        students,
        course,
        limits,
        workers=args.jobs,
        progress=not args.sem_barra,
        notebooks=notebooks,
    )
    seconds = time.monotonic() - start
    meta = {
        "semente": args.semente,
        "tempo_por_notebook_s": args.tempo,
        "memoria_por_notebook_bytes": args.memoria,
        "processos": args.jobs,
        "alunos": len(students),
        "notebooks": notebooks,
        "notebooks_corrigidos": sum(len(s.submissions) for s in students),
        "duracao_s": round(seconds, 1),
        "data": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    import tpt

    meta["tpt"] = tpt.__version__
    notes = {s.name: s.notes for s in students}
    write_all(saida, rows, notebooks, notes, meta)
    print(
        f"{fmt(len(students))} alunos, {fmt(meta['notebooks_corrigidos'])} notebooks entregues "
        f"de {', '.join(notebooks)} em "
        f"{fmt(seconds, 1)} s (semente {args.semente}, {fmt(args.tempo, 0)} s e "
        f"{fmt_bytes(args.memoria)} por notebook); resultados em {args.saida}/"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    commands = {"copias": cmd_copies, "corrigir": cmd_grade, "nbgrader": cmd_nbgrader}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
