"""A database as a release before a migration left it: the tests of a migration write rows the
old way into it, then open it with every migration and check what the new one made of them.
Named by the migration, not its number, so a renumbered file does not break them."""

from __future__ import annotations

import shutil
from pathlib import Path

from memory.db import MIGRATIONS_DIR, Database


async def database_before(path: Path, migration: str) -> Database:
    """The database at `path` migrated up to, not including, the migration `NNNN_<migration>.sql`
    (its own copy of the earlier files sits beside it, in `migrations/`)."""
    [target] = MIGRATIONS_DIR.glob(f"[0-9]*_{migration}.sql")
    before = path.parent / "migrations"
    before.mkdir()
    for earlier in sorted(MIGRATIONS_DIR.glob("*.sql")):
        if earlier.name < target.name:
            shutil.copy(earlier, before / earlier.name)
    return await Database.open(path, migrations=before)
