"""``nas spaces list|show|sample|draw``."""

from __future__ import annotations

import argparse
from typing import Any

from nas.cli.common import (
    add_space_config_option,
    arch_from_args,
    check_output,
    emit,
    seed_int,
    space_from_args,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    spaces = subparsers.add_parser("spaces", help="list, inspect, sample and draw search spaces")
    sub = spaces.add_subparsers(dest="spaces_command", metavar="ACTION")
    sub.required = True

    p = sub.add_parser("list", help="registered spaces (optionally matching a wildcard)")
    p.add_argument("pattern", nargs="?", default="*", help="shell wildcard, e.g. '*bert*'")
    p.add_argument("--json", action="store_true", help="print the result as one JSON document")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="choices, space size and graph summary of a space")
    p.add_argument("space", help="registered space name (nas spaces list)")
    add_space_config_option(p)
    p.add_argument("--json", action="store_true", help="print the result as one JSON document")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("sample", help="a random valid architecture, as JSON")
    p.add_argument("space", help="registered space name (nas spaces list)")
    p.add_argument("--seed", type=seed_int, default=0,
                   help="random seed of the draw (default 0)")
    add_space_config_option(p)
    p.add_argument("-o", "--output", help="also write the architecture file here")
    p.add_argument("--overwrite", action="store_true", help="replace an existing -o file")
    p.add_argument("--json", action="store_true", help="(the output is always JSON)")
    p.set_defaults(func=cmd_sample)

    p = sub.add_parser("draw", help="draw the cells / FFN expressions of an architecture")
    p.add_argument("space", help="registered space name (nas spaces list)")
    p.add_argument("--arch", help="architecture JSON file or inline JSON (default: the default)")
    add_space_config_option(p)
    p.add_argument("-o", "--output", required=True, help="PNG file to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing -o file")
    p.add_argument("--json", action="store_true", help="print the result as one JSON document")
    p.set_defaults(func=cmd_draw)


def cmd_list(args: argparse.Namespace) -> int:
    from nas.errors import NasError
    from nas.space import get_space, list_spaces

    rows: list[dict[str, Any]] = []
    for name in list_spaces(args.pattern):
        try:
            space = get_space(name)
        except NasError as err:  # a tabular benchmark whose data folder is missing
            rows.append({"name": name, "fixed": False, "choices": 0, "size": 0,
                         "description": f"unavailable: {err}"})
            continue
        rows.append({"name": name, "fixed": space.is_fixed, "choices": len(space.choices()),
                     "size": space.size(), "description": space.description})
    text = "\n".join(
        f"{r['name']:<18} {'fixed' if r['fixed'] else 'search':<7} "
        f"{r['choices']:>3} choices  size {_size(r['size'])}  {r['description']}" for r in rows
    ) or f"no space matches {args.pattern!r}"
    emit(args, rows, text)
    return 0


def _size(n: int) -> str:
    return f"{n:.2e}" if n >= 1e6 else str(n)


def cmd_show(args: argparse.Namespace) -> int:
    space = space_from_args(args)
    d = space.describe()
    lines = [f"{d['name']}: {d['description']}",
             f"{'fixed design (one architecture)' if d['fixed'] else 'search space'}; "
             f"{len(d['choices'])} choices; {_size(d['size'])} valid architectures",
             f"graph: {d['graph']['nodes']} nodes, {d['graph']['edges']} edges "
             f"({d['graph']['choice_edges']} edges and {d['graph']['choice_nodes']} nodes are "
             f"choices); fixed ops: {', '.join(d['graph']['ops'])}"]
    for c in space.choices():
        lines.append("  " + c.describe())
    for rule in d["constraints"]:
        lines.append(f"  rule: {rule}")
    emit(args, d, "\n".join(lines))
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    check_output(args.output, "file", overwrite=args.overwrite, overwrite_flag="--overwrite")
    space = space_from_args(args)
    arch = space.sample(args.seed)
    if args.output:
        arch.save(args.output)
    emit(argparse.Namespace(json=True), {**arch.to_dict(), "id": arch.id}, "")
    return 0


def cmd_draw(args: argparse.Namespace) -> int:
    from nas.draw import draw_architecture

    check_output(args.output, "file", overwrite=args.overwrite, overwrite_flag="--overwrite")
    space = space_from_args(args)
    arch = arch_from_args(space, args.arch)
    path = draw_architecture(space, arch, args.output)
    emit(args, {"space": space.name, "arch_id": arch.id, "output": str(path)},
         f"wrote {path} ({space.name}, arch {arch.id})")
    return 0
