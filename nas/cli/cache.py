"""``nas cache list|clear``: what the cache holds, per kind, and removing it.

The kinds are the cache root's folders (teachers, outputs, augment, general, warmup,
mixedvocab, latency, overlap, …): every cached step writes under one of them
(:mod:`nas.cache`).
"""

from __future__ import annotations

import argparse
import time

from nas.cli.common import emit, positive_float


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``nas cache list`` and ``nas cache clear`` to the top-level subparsers."""
    cache = subparsers.add_parser("cache", help="list or clear the cache (teachers, teacher "
                                                "outputs, augmented data, …)")
    sub = cache.add_subparsers(dest="cache_command", metavar="ACTION")
    sub.required = True

    p = sub.add_parser("list", help="entries and sizes per kind of the cache")
    _cache_dir_option(p)
    p.add_argument("--json", action="store_true", help="print the result as one JSON document")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("clear", help="remove cache entries (of one kind, older than N days)",
                       description="Remove cache entries: every kind, or KIND only; with "
                                   "--older-than only those not modified for DAYS days. "
                                   "Entries a run is reading or writing are left alone. "
                                   "Nothing outside the cache folder is removed, and a "
                                   "folder that is not a nas-engine cache is refused.")
    p.add_argument("kind", nargs="?", default=None,
                   help="a kind (a folder of the cache: nas cache list); default: every kind")
    p.add_argument("--older-than", type=positive_float, default=None, metavar="DAYS",
                   help="only entries not modified for DAYS days (fractions allowed)")
    p.add_argument("--dry-run", action="store_true", help="list what would go, remove nothing")
    _cache_dir_option(p)
    p.add_argument("--json", action="store_true", help="print the result as one JSON document")
    p.set_defaults(func=cmd_clear)


def _cache_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache-dir", default=None,
                        help="cache folder (default: $NAS_CACHE_DIR or ~/.cache/nas-engine)")


def _bytes(n: int) -> str:
    from nas.units import human

    return f"{human(n)}B"


def cmd_list(args: argparse.Namespace) -> int:
    from nas.cache import cache_root, cache_usage

    root = cache_root(args.cache_dir)
    rows = cache_usage(root)
    now = time.time()
    lines = [f"cache {root}: " + (f"{sum(r['entries'] for r in rows)} entries, "
                                  f"{_bytes(sum(r['bytes'] for r in rows))}" if rows
                                  else "empty")]
    for r in rows:
        age = "" if r["newest"] is None else \
            f"  newest {max(0.0, (now - r['newest']) / 86400):.1f} days ago"
        lines.append(f"  {r['kind']:<16} {r['entries']:>5} entries  {_bytes(r['bytes']):>8}{age}")
    emit(args, {"root": str(root), "kinds": rows}, "\n".join(lines))
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    from nas.cache import cache_root, clear_cache

    root = cache_root(args.cache_dir)
    result = clear_cache(root, args.kind, args.older_than, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    what = args.kind or "every kind"
    age = f", not modified for {args.older_than:g} days" if args.older_than else ""
    lines = [f"{verb} {len(result['removed'])} entries ({_bytes(result['bytes'])}) of "
             f"{what}{age} from {root}"]
    if args.dry_run:
        lines += [f"  {path}" for path in result["removed"]]
    lines += [f"  left alone (in use by another process): {path}" for path in result["busy"]]
    emit(args, result, "\n".join(lines))
    return 0
