-- 0003: Telegram updates already handled when the bot stopped cleanly. Never edit once landed.
-- A clean stop confirms to Telegram only the updates below the first one still unhandled, so
-- nothing fetched is lost; updates above it that were handled anyway are listed here and
-- skipped when Telegram delivers them again after the restart, so nothing is answered twice.
CREATE TABLE handled_updates (
    update_id   INTEGER PRIMARY KEY,
    handled_at  TEXT NOT NULL
);
