"""Edits of PTX and IR text that fail loudly: a test that plants a bug or fills a template with `str.replace`
would silently test the unedited kernel once the text it looks for changed. `checked(text).replace(old, new)`
asserts that `old` occurs (in every `.replace` of a chain); `filled(template, NAME=value, ...)` fills the
placeholders of a template, each of which must occur."""

from __future__ import annotations


class CheckedText(str):
    """A string whose `replace` asserts that the text it replaces occurs (at least `count` times when given)
    and returns a `CheckedText`, so that every step of a chain is checked."""

    def replace(self, old: str, new: str, count: int = -1) -> CheckedText:
        found = self.count(old)
        assert found >= max(count, 1), f"{old!r} occurs {found} time(s) in the text to edit"
        return CheckedText(str.replace(self, old, new, count))


def checked(text: str) -> CheckedText:
    """`text` whose `.replace` calls must each find what they replace."""
    return CheckedText(text)


def filled(template: str, **fields: str) -> str:
    """`template` with each placeholder (a keyword's name) replaced by its value, in the order given (a
    placeholder that another contains, WAIT in WAIT_LINK, comes after it); each must occur."""
    text = checked(template)
    for name, value in fields.items():
        text = text.replace(name, value)
    return str(text)


def planted(kernel: str, old: str, new: str) -> str:
    """`kernel` with one bug planted: `old` (which must occur) replaced by `new`."""
    return str(checked(kernel).replace(old, new))
