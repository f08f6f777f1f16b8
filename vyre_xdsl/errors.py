"""The one exception type users see."""


class VyreError(ValueError):
    """A user-facing error: names what is wrong and how to fix it."""
