"""Which checks a student may see before the due date, from an assignment's settings.

Each check has a visibility, in Gradescope's words: `visible` (always shown), `after_due_date`
(shown once the due date has passed) and `hidden` (never shown to students). The assignment's
`[service] visibility` is the default; `[visibility]` sets it for a graded cell ("ex3") or one
check ("ex3::test_structure", its name without the case in brackets).

Grading reads it too: each check has a *level* (0 visible, 1 after the due date, 2 for the TA
only); the checks of each level run after every check of the levels below, and what a student may
see at a level is computed as if the higher levels never ran (checks/plugin.py). `key` names the
split into levels, which a result records with its views.
"""
import json

VISIBLE, AFTER_DUE, HIDDEN = "visible", "after_due_date", "hidden"
LEVELS = {VISIBLE: 0, AFTER_DUE: 1, HIDDEN: 2}


def check_base(name):
    """A check's name without its case: "test_output_shape[1-10]" -> "test_output_shape"."""
    return name.split("[", 1)[0]


class Visibility:
    """Which checks a student may see, from an assignment's settings."""

    def __init__(self, default=VISIBLE, table=None):
        self.default, self.table = default, dict(table or {})

    @classmethod
    def of(cls, assignment):
        config = assignment.config
        return cls(config.service.visibility, config.visibility)

    def of_check(self, cell, check):
        return self.table.get(f"{cell}::{check_base(check)}", self.table.get(cell, self.default))

    def shown(self, cell, check, due_passed):
        word = self.of_check(cell, check)
        return word == VISIBLE or (word == AFTER_DUE and due_passed)

    def level(self, cell, check):
        """0 for a check shown always, 1 for one shown after the due date, 2 for the TA's alone."""
        return LEVELS[self.of_check(cell, check)]

    def hides_any(self):
        """Whether some check may be hidden from students at some time."""
        return self.default != VISIBLE or any(word != VISIBLE for word in self.table.values())

    def until_due(self):
        """Whether some check may be shown only once the due date has passed."""
        return self.default == AFTER_DUE or AFTER_DUE in self.table.values()

    def for_ta_only(self):
        """Whether some check may be for the TA alone (hidden even after the due date)."""
        return self.default == HIDDEN or HIDDEN in self.table.values()

    def key(self):
        """The split into levels, as a short text ("" when nothing is hidden): a result graded with
        another split holds other views (see record.Result.views)."""
        if not self.hides_any():
            return ""
        return json.dumps({"default": LEVELS[self.default],
                           "table": {key: LEVELS[word] for key, word in sorted(self.table.items())}},
                          sort_keys=True, separators=(",", ":"))
