"""Gradescope's results.json: the one output of a Gradescope run (see runs/gradescope.py)."""
import json
from functools import lru_cache
from pathlib import Path

from autograder.course import write_atomically
from autograder.outputs.base import Output

SCHEMA = Path(__file__).with_name("gradescope_results.schema.json")


@lru_cache(maxsize=None)
def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))


def schema_errors(results):
    """Where `results` breaks Gradescope's results.json format ([] when it is valid)."""
    return [f"{'/'.join(map(str, error.path)) or '(top)'}: {error.message}"
            for error in _validator().iter_errors(results)]


class ResultsJson(Output):
    """results.json for one submission, its tests named as students see them (`titles`,
    {grade id: title}). `note` is added to the result first (other notebooks that were
    found and not graded, say). `written` is the result it wrote, or None."""

    what = "results.json"

    def __init__(self, path, titles=None, note=""):
        self.path, self.titles, self.note = Path(path), titles or {}, note
        self.written = None

    def add(self, result):
        result.output = result.output.removeprefix(f"{result.student_id}: ")  # Gradescope knows who
        if self.note:
            result.add_note(self.note)
        results = result.to_json(self.titles)
        problems = schema_errors(results)
        if problems:  # our bug, not the student's: say so rather than upload something Gradescope rejects
            raise RuntimeError(f"results.json would not match Gradescope's format: {problems[:3]}")
        write_atomically(self.path, json.dumps(results, indent=1))
        self.written = result
