"""Media made readable for a model: voice (Ogg length), images, documents and their bounded
reader children (documents and pages: document_child; images: image_child), and the inbox of
files waiting for a turn. No Telegram here.

Import direction: `bot → agent → web, mcp_client → reminders, media → memory → models →
primitives`; media and reminders do not import each other.
"""

from primitives import MnemobotError


class MediaError(MnemobotError):
    """Base of the media layer's errors: a file that cannot be made readable for a model;
    `reason` is a short key the bot turns into a sentence.

    MediaError
    ├── DocumentError  media/documents.py  the document cannot be read
    └── ImageError     media/images.py     the image cannot be sent ("not_an_image", "too_big")
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
