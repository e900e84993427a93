"""`python -m bot [run]` — and room for more subcommands (export, backup).

Configuration problems end the process with exit code 2 and one line on stderr naming the
setting, before anything connects: a self-hoster reads one line, not a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from primitives.litellm_env import keep_litellm_offline

# Before litellm is imported anywhere: no network at import, no tokenizer downloads.
keep_litellm_offline()

EXIT_CONFIG = 2
EXIT_CRASH = 1


def _run(args: argparse.Namespace) -> int:
    from bot.app import prepare, run_polling, secrets_of
    from bot.config import load_settings
    from models.logging_setup import configure_logging

    settings = load_settings()
    configure_logging(
        level=settings.LOG_LEVEL, fmt=settings.LOG_FORMAT, secrets=secrets_of(settings)
    )
    prepared = prepare(settings)
    run_polling(prepared)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Subcommands register a function in `func`; a new one is a function in SUBCOMMANDS."""
    parser = argparse.ArgumentParser(prog="python -m bot", description="mnemobot")
    parser.set_defaults(func=_run)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = subparsers.add_parser("run", help="run the bot (the default)")
    run.set_defaults(func=_run)
    for register in SUBCOMMANDS:
        register(subparsers)
    return parser


def _add_export(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from bot.cli.export import add_export_command

    add_export_command(subparsers)


def _add_backup(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from bot.cli.backup import add_backup_command

    add_backup_command(subparsers)


# Functions taking the subparsers action and adding one subcommand (export, backup, ...).
SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    _add_export,
    _add_backup,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand. Nothing escapes unscrubbed: a configuration error is one line, any
    other failure is logged through the redacting pipeline and summed up in one line."""
    from bot.config import ConfigError
    from models.catalog import CatalogError
    from models.logging_setup import install_exception_hooks, log_crash, scrubbed_line

    install_exception_hooks()
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ConfigError, CatalogError) as exc:
        print(f"mnemobot: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except Exception as exc:
        from telegram.error import InvalidToken

        if isinstance(exc, InvalidToken):
            print(
                "mnemobot: TELEGRAM_BOT_TOKEN: rejected by the Bot API at TELEGRAM_BASE_URL "
                "(check the token, and that the URL ends in /bot)",
                file=sys.stderr,
            )
            return EXIT_CONFIG
        log_crash("bot_crashed", exc)
        print(f"mnemobot: stopped by an error: {scrubbed_line(exc)}", file=sys.stderr)
        return EXIT_CRASH


if __name__ == "__main__":
    sys.exit(main())
