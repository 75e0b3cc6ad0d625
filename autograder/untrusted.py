"""Text that comes from students, made safe for where it goes.

File and folder names, grade ids, the contents of `timestamp.txt` and messages
built from what a student's code did reach the TA's terminal, spreadsheets, LMS
imports and file names. Each place has its own hazards:

- a terminal runs escape sequences (an OSC 52 sequence writes the clipboard) and
  rich reads `[...]` as markup (`[/yellow]` ends the command with a traceback):
  `for_terminal` shows control characters as escapes and escapes markup;
- a spreadsheet runs a cell that starts with = + - @ tab or CR as a formula:
  `for_spreadsheet` puts a quote in front, as OWASP recommends for CSV injection;
- a file system limits a name to 255 bytes, and names that start with a dot are the
  batch's own files (`.batch.json`, `.answers/`): `student_id` renames what cannot
  be a student's id, and says why so the TA can be told.
"""
import hashlib
import os
import re
import unicodedata

# nbgrader's gradebook keeps a student id in a String(128) column; every file named
# after a student (<id>.json, feedback/<id>.html, history/..., autograded/<id>/) then
# fits well within the 255 bytes a file name may have.
MAX_ID_BYTES = 120
TERMINAL_LIMIT = 300  # characters of one student-derived text on the terminal
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# Characters that change how text is shown without being text themselves: right-to-left
# overrides and isolates, which can make a name read as another one.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _hidden(character):
    """A control character, a lone surrogate (a file name that is not UTF-8), a line or
    paragraph separator, or a bidirectional control."""
    return unicodedata.category(character) in ("Cc", "Cs", "Zl", "Zp") or character in BIDI_CONTROLS


def visible(text, limit=TERMINAL_LIMIT, newlines=False):
    """`text` with every hidden character shown as its escape (\\x1b, \\u202e) and cut to
    about `limit` characters, saying how many were left out. `newlines`: keep line breaks."""
    text = str(text)
    cut = len(text) - limit if limit is not None and len(text) > limit else 0
    if cut:
        text = text[:limit]
    shown = "".join(c.encode("unicode_escape", "backslashreplace").decode("ascii")
                    if _hidden(c) and not (newlines and c == "\n") else c for c in text)
    return shown + (f"... ({cut:,} more characters)" if cut else "")


# C0 controls but tab and line feed, DEL, and C1 controls (0x9b is a one-byte CSI: an escape
# sequence without ESC)
_CONTROLS = {code: None for code in [*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f, *range(0x80, 0xa0)]}


def without_controls(text):
    """Text the student's code wrote (an error it raised), without the control characters a
    terminal or a page would act on; tabs and line breaks kept."""
    return str(text).translate(_CONTROLS)


def for_terminal(text, limit=TERMINAL_LIMIT, newlines=False):
    """`visible(text)` with rich's markup escaped: printed exactly as it reads."""
    from rich.markup import escape  # here: the workers import this module, and need no rich

    return escape(visible(text, limit, newlines))


def for_spreadsheet(value):
    """A CSV cell that a spreadsheet shows as text, never runs as a formula (OWASP, CSV
    injection): text starting with = + - @ tab or CR gets a quote in front."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _as_bytes(name):
    try:
        return os.fsencode(name)  # the file name's own bytes, even where they are not UTF-8
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogatepass")


def student_id(name):
    """(the id to grade a submission called `name` under, why it differs from `name` or "").

    A name that is empty, starts with a dot, holds hidden characters or is longer than
    MAX_ID_BYTES becomes a safe one: hidden characters and leading dots become "_", the
    rest is cut short, and the first 8 hex digits of the name's SHA-256 follow, so the
    same name gets the same id on every run and two names never share one."""
    raw = _as_bytes(name)
    reasons = []
    if not name:
        reasons.append("is empty")
    if name.startswith("."):
        reasons.append("starts with a dot, as the grader's own files do")
    if any(_hidden(c) for c in name):
        reasons.append("holds control characters or bytes that are not text")
    if len(raw) > MAX_ID_BYTES:
        reasons.append(f"is {len(raw)} bytes long, more than the {MAX_ID_BYTES} a student id may have")
    if not reasons:
        return name, ""
    cleaned = "".join("_" if _hidden(c) else c for c in name)
    dots = len(cleaned) - len(cleaned.lstrip("."))
    cleaned = "_" * dots + cleaned[dots:]
    cleaned = cleaned.encode("utf-8")[:MAX_ID_BYTES - 9].decode("utf-8", "ignore") or "student"
    safe = f"{cleaned}-{hashlib.sha256(raw).hexdigest()[:8]}"
    return safe, (f"the submission's name '{visible(name, 80)}' {_joined(reasons)}, so it is graded as {safe}"
                  " (rename its file or folder to the student's id and grade it again)")


def _joined(words):
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def listed(names, shown=5, each=80):
    """Names a student chose, for a note or a message: the first `shown`, each made visible and cut
    to `each` characters, and how many more there are ("a, b, c and 4 more")."""
    names = list(names)
    more = len(names) - shown
    return ", ".join(visible(name, each) for name in names[:shown]) + (f" and {more} more" if more > 0 else "")


# -- the ids of LMS students graded without a roster (runs/intake) and read from an LMS's own
# roster files (outputs/lms.py), made the same way on both sides
def moodle_student_id(name):
    """A Moodle student's id from their full name: its words, "jane-doe"."""
    text = unicodedata.normalize("NFKD", str(name)).casefold()
    text = "".join(c for c in text if not unicodedata.combining(c))
    return "-".join(re.findall(r"\w+", text)) or "student"


def canvas_gradebook_id(name, user_id):
    """A Canvas student's id from the gradebook's "Doe, Jane" and user id: the name as Canvas
    writes it in its download's file names ("doejane") and the user id, as the intake reads them."""
    return f"{re.sub(r'[^0-9a-z]', '', str(name).lower())}-{user_id}"
