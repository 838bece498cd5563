"""The run commands' --help in sections by each option's declared group, and the "did you mean" of every name a user
can mistype: a format, a pass, an option, a policy key, a factory's callable."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from convert import options
from convert.cli import main
from tests.conftest import run_cli

FRAMEWORKS = ("torch", "tensorflow", "jax", "keras", "onnxruntime", "openvino", "tensorrt")
SECTION = re.compile(r"^(\S.*):$")
ROW = re.compile(r"^  (?:-\w, )?(--[\w-]+)")  # an option's row: its flag first ("-q, --quiet" too)
CONSOLE_SCRIPT = Path(sys.executable).parent / "convert"


def _flags_by_section(help_text: str) -> dict[str, list[str]]:
    """The flags each section of a --help lists, in order (the usage and description are in no section)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in help_text.splitlines():
        if heading := SECTION.match(line):
            current = sections.setdefault(heading[1], [])
        elif current is not None and (row := ROW.match(line)):
            current.append(row[1])
    return sections


def _help(*command: str) -> str:
    result = CliRunner().invoke(main, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def _section_of(sections: dict[str, list[str]], flag: str) -> list[str]:
    return [title for title, flags in sections.items() for listed in flags if listed == flag]


@pytest.mark.fast
def test_every_option_declares_one_of_the_groups():
    assert all(option.group in options.GROUPS for option in options.OPTIONS)
    declared = options.OPTIONS[0]
    with pytest.raises(ValueError, match="group"):
        options.RunOption(declared.name, declared.flag, declared.help, group="Misc")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="group"):
        options.RunOption(declared.name, declared.flag, declared.help)  # type: ignore[call-arg]


@pytest.mark.fast
def test_export_help_shows_each_group_and_every_option_once_under_its_group():
    sections = _flags_by_section(_help("export"))
    assert list(sections) == [*options.GROUPS, "Other options"]  # every group has an option of the export command
    for option in options.OPTIONS:
        assert _section_of(sections, option.flag) == [option.group], option.flag
    assert _section_of(sections, "--quiet") == _section_of(sections, "--verbose") == ["Output and report"]
    assert sections["Other options"] == ["--help"]
    assert sum(len(flags) for flags in sections.values()) == len(options.OPTIONS) + 3  # --quiet, --verbose, --help


@pytest.mark.fast
def test_validate_help_groups_the_options_it_takes():
    sections = _flags_by_section(_help("validate"))
    taken = [option for option in options.OPTIONS if option.name not in options.MAKES_ARTIFACTS]
    for option in taken:
        assert _section_of(sections, option.flag) == [option.group], option.flag
    assert _section_of(sections, "--against") == ["Input and source"]
    assert not _section_of(sections, "--to")


@pytest.mark.fast
def test_each_help_is_one_short_sentence():
    for option in options.OPTIONS:
        assert len(option.help) <= 170 and not re.search(r"(?<!e\.g)\. [A-Z]", option.help), option.flag
        assert option.help.endswith("."), option.flag


def _run_console_script(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run the installed `convert` (no PYTHONPATH, outside the repository); the top-level modules it imported."""
    if not CONSOLE_SCRIPT.is_file():
        pytest.skip(f"no console script at {CONSOLE_SCRIPT}: the package is not installed in this environment")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"} | {"PYTHONPROFILEIMPORTTIME": "1", "COLUMNS": "120"}
    done = subprocess.run([str(CONSOLE_SCRIPT), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines() if line.startswith("import time:")}
    return done, imported


@pytest.mark.fast
def test_the_installed_console_script_shows_both_helps_and_imports_no_framework(tmp_path):
    done, imported = _run_console_script("--help", cwd=tmp_path)
    assert done.returncode == 0 and "MODEL --to FORMATS" in done.stdout and "doctor" in done.stdout
    assert not imported & set(FRAMEWORKS)
    done, imported = _run_console_script("export", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [title for title in options.GROUPS if f"\n{title}:\n" not in done.stdout] == []
    assert not imported & set(FRAMEWORKS)


def _one_paragraph_error(run) -> str:
    """The run's error: exit 2, one paragraph (one line starting 'error:'), no traceback, no click usage block."""
    assert run.returncode == 2, run.output
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in run.output and "Usage:" not in run.output, run.output
    return errors[0]


@pytest.fixture
def onnx_file(tmp_path) -> Path:
    """A file that names an ONNX model: a run's options are checked before the model is read."""
    path = tmp_path / "model.onnx"
    path.write_bytes(b"")
    return path


@pytest.mark.fast
@pytest.mark.parametrize(
    "args, suggestion",
    [
        (["--to", "onxx"], "Did you mean onnx?"),
        (["--to", "onnx", "--optimize", "fp61"], "Did you mean fp16?"),
        (["--to", "onnx", "--optimize", "trt:fp61"], "Did you mean trt:fp16?"),
        (["--to", "onnx", "--package", "archiv"], "Did you mean archive?"),
        (["--to", "onnx", "--optimise", "int8"], "Did you mean --optimize?"),
    ],
)
def test_a_mistyped_format_pass_or_option_names_the_closest(onnx_file, tmp_path, args, suggestion):
    error = _one_paragraph_error(run_cli(str(onnx_file), *args, "--out", str(tmp_path / "out")))
    assert suggestion in error
    assert not (tmp_path / "out").exists()


@pytest.mark.fast
def test_a_name_close_to_none_gets_the_choices_without_a_guess(onnx_file, tmp_path):
    error = _one_paragraph_error(run_cli(str(onnx_file), "--to", "pdf", "--out", str(tmp_path / "out")))
    assert "Did you mean" not in error and "Choose from: onnx" in error


@pytest.mark.fast
def test_an_unknown_option_is_one_paragraph_with_where_to_look(onnx_file):
    error = _one_paragraph_error(run_cli(str(onnx_file), "--to", "onnx", "--sampels", "3"))
    assert error.startswith("error: no such option --sampels. Did you mean --samples? Run '")
    assert error.endswith(" export --help' for every option.")  # by the name it was run as: convert, python -m convert


@pytest.mark.fast
def test_a_mistyped_callable_names_the_one_the_file_defines(tmp_path):
    (tmp_path / "mymodel.py").write_text("def build():\n    return None\n\n\nclass Nets:\n    def small(self):\n        return None\n")
    error = _one_paragraph_error(run_cli("mymodel.py:biuld", "--to", "onnx", "--no-isolation", cwd=tmp_path))
    assert "mymodel.py has no attribute 'biuld'" in error and "Did you mean mymodel.py:build?" in error
    error = _one_paragraph_error(run_cli("mymodel.py:Nets.smal", "--to", "onnx", "--no-isolation", cwd=tmp_path))
    assert "Did you mean mymodel.py:Nets.small?" in error


@pytest.mark.fast
def test_a_policy_names_the_key_format_and_pass_it_most_likely_meant(tmp_path):
    policy = tmp_path / "promotion.yaml"
    policy.write_text("model: {path: m.pt2, weigths: w.safetensors}\nrequire: {targets: [onnx]}\n")
    error = _one_paragraph_error(run_cli("gate", str(policy)))
    assert "line 1: model.weigths: unknown key (allowed: path," in error and "; did you mean weights?)" in error
    policy.write_text("model: {path: m.pt2}\nrequire:\n  targets: [onxx]\n  optimizations: [fp61]\n")
    error = _one_paragraph_error(run_cli("gate", str(policy)))
    assert "unknown format 'onxx' (known: onnx," in error and "did you mean onnx?" in error and "did you mean fp16?" in error
