"""An assignment's settings (assignment.toml) are typed in one place, autograder/course/settings.py:
a misspelled key or a wrong type is refused with its line, and docs/settings.md lists every key."""
import re
from dataclasses import MISSING, fields

import pytest

from autograder.course import Course, CourseError
from autograder.course.settings import TABLES, AssignmentSettings, settings_table

from helpers import COURSE, ROOT


def assignment_with(tmp_path, text, name="x"):
    """The assignment `name` of a course in tmp_path whose assignment.toml is `text`."""
    folder = tmp_path / "exercises" / name
    folder.mkdir(parents=True)
    (folder / "assignment.toml").write_text(text)
    return Course(tmp_path).assignment(name)


def refused(tmp_path, text):
    with pytest.raises(CourseError) as caught:
        assignment_with(tmp_path, text).settings
    return str(caught.value)


def test_the_bundled_assignments_load():
    read = {a.name: a for a in COURSE.assignments()}
    assert {"self_attention", "causal_attention"} <= set(read)
    causal = read["causal_attention"]
    assert isinstance(causal.config, AssignmentSettings)
    assert causal.title == "Causal attention" and causal.order == 2
    assert causal.preimport == ["tiktoken", "torch.utils.data"]
    assert causal.builds_on["ex5"] == ["ex3"] and causal.config.validate.diagnoses_named_min == 0.9
    assert causal.late_settings is None and causal.limits == {}
    assert read["self_attention"].order == 1 and read["self_attention"].builds_on["ex6"] == ["ex4", "ex5"]
    for assignment in read.values():  # the file read on its own says the same
        assert AssignmentSettings.read(assignment.folder / "assignment.toml") == assignment.config


def test_the_scaffolds_template_is_read_without_complaint():
    from autograder.authoring.scaffold import ASSIGNMENT_TOML

    text = ASSIGNMENT_TOML.format(title="T", order=3)
    uncommented = text.replace("# [limits]", "[limits]").replace("# timeout", "timeout").replace(
        "# memory_mb", "memory_mb").replace("# warm_up_on_release", "warm_up_on_release").replace(
        "# warm_up_seconds", "warm_up_seconds")
    import tomllib

    for version in (text, uncommented):
        assert AssignmentSettings.from_dict(tomllib.loads(version), "a.toml", version).order == 3
    assert "timeout = 120" in uncommented and "warm_up_seconds = 2" in uncommented


@pytest.mark.parametrize("text, line, words", [
    ('title = "x"\ntitel = "y"\n', 2, "unknown key 'titel'; did you mean 'title'?"),
    ('title = "x"\n\n[limits]\nmemory_mb = 10\ntimout = 5\n', 5,
     "unknown key 'timout' in [limits]; did you mean 'timeout'?"),
    ('[sandbox]\npreimport = []\nwarm_up_on_relase = false\n', 3,
     "unknown key 'warm_up_on_relase' in [sandbox]; did you mean 'warm_up_on_release'?"),
    ('[sandbox]\n# warm_up_seconds = 2\n\n[validate]\ndiagnosis_named_min = 0.9\n', 5,
     "unknown key 'diagnosis_named_min' in [validate]; did you mean 'diagnoses_named_min'?"),
    ('[late]\ndue = 2026-11-20T23:59:00Z\npercent_per_dy = 10\n', 3,
     "unknown key 'percent_per_dy' in [late]; did you mean 'percent_per_day'?"),
    ('order = 1\n[limit]\ntimeout = 3\n', 2, "unknown table [limit]; did you mean [limits]?"),
    ('title = "x"\nlimits.timout = 3\n', 2, "unknown key 'timout' in [limits]; did you mean 'timeout'?"),
    ('title = "x"\nsandbox = {preimprt = []}\n', 2, "unknown key 'preimprt' in [sandbox]; did you mean 'preimport'?"),
])
def test_a_misspelled_key_is_refused_with_its_line_and_the_key_it_resembles(tmp_path, text, line, words):
    message = refused(tmp_path, text)
    assert f"assignment.toml line {line}: {words}" in message, message
    assert str(tmp_path / "exercises" / "x" / "assignment.toml") in message


def test_a_key_like_none_names_them_all(tmp_path):
    message = refused(tmp_path, '[sandbox]\nxyzzy = 1\n')
    assert "line 2: unknown key 'xyzzy' in [sandbox] (known: preimport, warm_up_on_release, warm_up_seconds)" \
           in message


@pytest.mark.parametrize("text, line, words", [
    ('order = "2"\n', 1, "order: an integer, as in order = 2 (got '2')"),
    ('title = 3\n', 1, "title: text"),
    ('[limits]\ntimeout = "soon"\n', 2, "[limits] timeout: a number of seconds above 0, as in timeout = 120"),
    ('[limits]\nmemory_mb = 0.5\n', 2, "[limits] memory_mb: a whole number of megabytes above 0"),
    ('[sandbox]\npreimport = "torch"\n', 2, "[sandbox] preimport: a list of module names"),
    ('[sandbox]\nwarm_up_on_release = "no"\n', 2, "[sandbox] warm_up_on_release: true or false"),
    ('[sandbox]\nwarm_up_seconds = -1\n', 2, "[sandbox] warm_up_seconds: a number of seconds, as in"),
    ('[validate]\ndiagnoses_named_min = 90\n', 2, "[validate] diagnoses_named_min: a fraction from 0 to 1"),
    ('[late]\ndue = 5\n', 2, "[late] due: a date and time"),
    ('[builds_on]\nex5 = "ex3"\n', 2, "[builds_on]: each entry is a list of graded cells"),
    ('sandbox = 3\n', 1, "[sandbox] is a table"),
])
def test_a_wrong_type_is_refused_with_its_line(tmp_path, text, line, words):
    message = refused(tmp_path, text)
    assert f"assignment.toml line {line}: {words}" in message, message


def test_a_value_set_by_code_is_checked_too_and_named_without_a_line(tmp_path):
    assignment = assignment_with(tmp_path, "order = 3\n")
    assignment.settings.setdefault("limits", {})["timeout"] = "soon"
    with pytest.raises(CourseError, match=r"assignment.toml: \[limits\] timeout: a number of seconds"):
        assignment.limits


def test_the_defaults(tmp_path):
    assignment = assignment_with(tmp_path, "", name="plain")
    assert assignment.title == "plain" and assignment.order == 1000
    assert assignment.limits == {} and assignment.preimport == [] and assignment.warm_up_on_release is True
    assert assignment.builds_on == {} and assignment.late_settings is None
    assert assignment.config.validate.diagnoses_named_min == 0.9
    late = assignment.config.late
    assert (late.grace_minutes, late.percent_per_day, late.percent_per_hour, late.cap_percent) == (0, 0, 0, 100)
    assert late.due is None and late.cutoff is None
    import json

    assert json.loads(assignment.sandbox_files()["settings.json"]) == {"preimport": []}
    from autograder.authoring.validate import DIAGNOSES_MIN

    assert DIAGNOSES_MIN == assignment.config.validate.diagnoses_named_min


def test_the_values_given_are_read(tmp_path):
    import json

    assignment = assignment_with(tmp_path, 'title = ""\norder = -1\n[limits]\ntimeout = 120\nmemory_mb = 512\n'
                                 '[sandbox]\nwarm_up_on_release = false\nwarm_up_seconds = 0.5\n'
                                 '[late]\ndue = 2026-11-20T23:59:00Z\npercent_per_day = 10\n')
    assert assignment.title == "" and assignment.order == -1
    assert assignment.limits == {"timeout": 120.0, "memory_bytes": 512 * 2**20}
    assert assignment.warm_up_on_release is False
    assert json.loads(assignment.sandbox_files()["settings.json"])["warm_up_seconds"] == 0.5
    assert set(assignment.late_settings) == {"due", "percent_per_day"}  # as written, for runs/late.py
    assert assignment.config.late.percent_per_day == 10 and assignment.config.late.cap_percent == 100


def every_field():
    yield from ((None, spec) for spec in fields(AssignmentSettings) if spec.metadata["kind"] not in ("table",
                                                                                                      "internal"))
    for table, table_class in TABLES.items():
        assert table_class.__doc__.startswith(f"[{table}]: ")
        yield from ((table, spec) for spec in fields(table_class))


def test_every_field_has_a_description_a_kind_and_an_example():
    from autograder.course.settings import KINDS

    for table, spec in every_field():
        assert spec.metadata["doc"].strip() and spec.metadata["example"], (table, spec.name)
        assert spec.metadata["kind"] in KINDS or spec.metadata["kind"] in ("builds_on", "visibility_table"), (table,
                                                                                                         spec.name)
        if spec.default is not MISSING and spec.default is not None and spec.metadata["kind"] in KINDS:
            assert KINDS[spec.metadata["kind"]][1](spec.default), (table, spec.name)  # the default is its type
    assert set(TABLES) | {"builds_on"} <= {spec.name for spec in fields(AssignmentSettings)}


def test_docs_settings_lists_every_key():
    docs = (ROOT / "docs" / "settings.md").read_text()
    for table, spec in every_field():
        if spec.metadata["kind"] == "builds_on":
            assert "| [builds_on] | *graded cell* |" in docs
        elif spec.metadata["kind"] == "visibility_table":
            assert "| [visibility] | *cell* or *cell::check* |" in docs
        else:
            place = f"[{table}]" if table else "(top level)"
            assert re.search(rf"\| {re.escape(place)} \| {spec.name} \|", docs), (table, spec.name)
    assert settings_table() in docs, "docs/settings.md is behind the code: write its table again (see the file)"
