"""Repairs of the mistakes the feedback names, made in a student's own code: does the advice hold?

A diagnosis names a known mistake (a mutant of the error model: the reference with the edit
`old` -> `new`). Where the student's answer holds that mistake in the mutant's own words (the
tokens of `new`, once, spaces and comments aside), undoing it is a plain text edit: put `old`
there instead. Two places use it:
- grading (grading/repairs.py): the submission runs the repaired cell in a sealed fork and its
  checks are asked again there, so "fails because of the mistake above" is said only of a check
  the repair makes pass;
- `autograder validate` grades every corpus entry again with each named mistake repaired so, and
  counts the promises that did not hold (authoring/validate.py `check_repairs`).

A mistake made in other words (other names, a deletion: `new` empty) is not repaired here.
"""
import io
import tokenize

SKIP = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT, tokenize.ENDMARKER}


def _tokens(source):
    """[(text, start offset, end offset)] of the code tokens of `source`. A fragment (an edit's
    `old` or `new`) may leave a bracket open: the tokens before the tokenizer gives up still count.
    None when it gives nothing (then nothing is repaired)."""
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    found = []
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    while True:
        try:
            token = next(tokens)
        except (StopIteration, tokenize.TokenError, IndentationError, SyntaxError):
            break
        if token.type in SKIP or token.type == tokenize.ERRORTOKEN and not token.string.strip():
            continue
        (row, col), (end_row, end_col) = token.start, token.end
        found.append((token.string, starts[row - 1] + col, starts[end_row - 1] + end_col))
    return found or None


def _find(tokens, needle):
    """Where the token texts `needle` occur in `tokens`: [(first index, last index)]."""
    n, texts = len(needle), [text for text, _, _ in tokens]
    return [(i, i + n - 1) for i in range(len(texts) - n + 1) if texts[i:i + n] == needle]


def undo(source, old, new, column=None):
    """`source` with the one occurrence of `new` (by tokens) replaced by `old`, or None when `new`
    is empty or a lone token (a name like `scores` says nothing of where the mistake is), is not
    there, or is there more than once (which one would be a guess). `column` is where `old` starts on
    its line in the reference: its later lines are that much deeper than its first (by default, as
    deep as the least indented of them)."""
    tokens, needle = _tokens(source), _tokens(new)
    if not tokens or not needle or len(needle) < 2:
        return None
    places = _find(tokens, [text for text, _, _ in needle])
    if len(places) != 1:
        return None
    first, last = places[0]
    start, end = tokens[first][1], tokens[last][2]
    line_start = source.rfind("\n", 0, start) + 1
    indent = source[line_start:start][:len(source[line_start:start]) - len(source[line_start:start].lstrip())]
    lines = old.strip("\n").splitlines() or [""]
    # `old` is written in the reference's indentation: its later lines keep their depth below its first
    later = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
    base = len(lines[0]) - len(lines[0].lstrip()) or (column if column is not None else min(later, default=0))
    body = [lines[0].lstrip()] + [indent + line[base:] if line.strip() else "" for line in lines[1:]]
    return source[:start] + "\n".join(body) + source[end:]


def column_of(text, fragment):
    """Where `fragment` starts on its line in `text` (the reference's region), or None."""
    at = text.find(fragment.strip("\n"))
    return None if at < 0 else at - (text.rfind("\n", 0, at) + 1)


def repaired(sources, mutants, reference=None):
    """{cell: source} with every mutant of `mutants` undone in the cell its edits name, or None when
    one of them cannot be undone (it is not in the student's words). `sources` is {cell: source};
    `reference` the reference's {region: text}, where each edit's `old` says how deep it sits."""
    sources = dict(sources)
    for mutant in mutants:
        for cell, old, new in mutant.edits:
            column = column_of((reference or {}).get(cell, ""), old)
            fixed = undo(sources.get(cell, ""), old, new, column)
            if fixed is None:
                return None
            sources[cell] = fixed
    return sources
