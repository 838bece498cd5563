"""The command line: ``convert MODEL --to FORMATS`` (the default command), ``convert doctor``.

Exit codes: 0 every check passed; 1 a validation failed; 2 a user or input error; 3 an internal error.
"""

from __future__ import annotations

import shlex
import signal
import sys
import traceback
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from convert import __version__, options
from convert.errors import ConvertError
from convert.registry import REGISTRY
from convert.text import did_you_mean

EXIT_USER, EXIT_INTERNAL = 2, 3
# soft wrap: off a terminal rich would break stderr's paragraphs at 80 columns; a terminal wraps them, a CI log keeps each whole
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


# the sections of the run commands' own options (the run options declare theirs in convert/options.py)
_OWN_OPTION_GROUPS: dict[str, options.Group] = {"model": "Input and source", "quiet": "Output and report", "verbose": "Output and report"}
_OTHER_OPTIONS = "Other options"  # --help itself


class _UsageParagraph(click.UsageError):
    """A command-line mistake shown as the tool's other user errors are: one paragraph with its next step, exit 2."""

    def show(self, file=None) -> None:
        stderr.print(f"[bold red]error:[/] {escape(self.message)}", soft_wrap=True)


class _Command(click.Command):
    """A command whose command-line mistakes are one paragraph, a mistyped option's naming the closest one."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as error:
            flags = [flag for param in self.get_params(ctx) for flag in (*param.opts, *param.secondary_opts) if flag.startswith("--")]
            suggestion = did_you_mean(error.option_name, flags)
            raise _UsageParagraph(f"no such option {error.option_name}. {suggestion}{_help_hint(ctx)}", ctx) from None
        except click.UsageError as error:
            raise _UsageParagraph(f"{error.format_message()} {_help_hint(ctx)}", ctx) from None


class _RunCommand(_Command):
    """A command taking the run options: its --help lists them in sections by their group, not as one list of forty
    (click has no option groups)."""

    def format_options(self, ctx, formatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            row = param.get_help_record(ctx)
            if row is not None and not isinstance(param, click.Argument):  # arguments are in the usage line
                sections.setdefault(_group_of(param.name), []).append(row)
        for title in (*options.GROUPS, _OTHER_OPTIONS):
            if title in sections:
                with formatter.section(title):
                    formatter.write_dl(sections[title])


def _group_of(parameter: str) -> str:
    option = next((option for option in options.OPTIONS if option.parameter == parameter), None)
    return option.group if option is not None else _OWN_OPTION_GROUPS.get(parameter, _OTHER_OPTIONS)


def _help_hint(ctx) -> str:
    return f"Run '{ctx.command_path} --help' for every option."


class _DefaultGroup(click.Group):
    """A group whose first argument, when it is not a subcommand, is the model of the default command."""

    default_command = "export"
    command_class = _Command

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx, formatter):
        formatter.write_usage(ctx.command_path, "MODEL --to FORMATS [OPTIONS]  |  COMMAND [ARGS]...")


@click.group(cls=_DefaultGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="convert")
def main() -> None:
    """Export a PyTorch (or Hugging Face Transformers), Keras or JAX model to ONNX, TorchScript, torch.export, TF SavedModel,
    TFLite and ExecuTorch, or take an ONNX model as it is; optimize it, and validate every artifact numerically against
    the source model, on every device present; gate its promotion in CI.

    \b
      convert model.pt2 --to onnx,torchscript,torch_export --out out/
      convert mypkg.nets:build_model --weights weights.safetensors --input "x:float32[B,3,224,224]" --to onnx
      convert model.pt --trust-code --input "input_ids:int64[B,S]{0..30521}" --input "attention_mask:int64[B,S]{0..1}" --to onnx
      convert ./my-bert/ --to onnx
      convert ./my-llama/ --task text-generation-with-past --to onnx --optimize int8
      convert model.keras --to savedmodel,onnx,tflite
      convert model.pt2 --to executorch,tflite --optimize executorch:int8
      convert saved_model_dir/ --trust-code --to onnx,tflite
      convert mypkg.model:apply_fn --framework jax --params params.msgpack --input "x:float32[B,28,28,1]" --to onnx,savedmodel,tflite
      convert mypkg.model:make_nnx_model --framework jax --input "tokens:int32[B,S]{0..999}" --to onnx
      convert model.pt2 --to onnx --optimize simplify,fp16,int8,openvino:int8 --calibration-data calib.npz
      convert model.keras --to onnx --optimize auto --accuracy "cosine>=0.995"
      convert model.pt2 --to onnx --optimize trt:fp16 --shape-range "B=1..8..32"
      convert model.pt2 --to onnx,torchscript --benchmark --threads 2
      convert gate promotion.yaml --baseline reports/last-promoted.json --junit out/junit.xml --markdown "$GITHUB_STEP_SUMMARY"
      convert batch zoo.yaml --workers 2
      convert batch zoo.yaml --engine ray --address auto
      convert model.onnx --optimize auto
      convert validate out/model.onnx --against model.pt2
      convert report out/report.json --html out/report.html
      convert doctor

    Run 'convert export --help' for every option of the default command, 'convert gate --help' for the promotion gate,
    'convert batch --help' for many models at once.
    Exit codes: 0 all checks passed, 1 a validation failed or a requested format or pass could not be built here
    (--unbuilt warn accepts that), 2 bad input or options or an artifact no strategy could produce, 3 internal error.
    """


def _cache_options(command):
    """--no-cache and --cache-dir, shared by every command that runs the pipeline."""
    return options.click_options(options.CACHE_OPTIONS)(command)


def _formats_help() -> str:
    return ", ".join(REGISTRY.target_formats())


@main.command("export", cls=_RunCommand)
@click.argument("model")
@options.click_options(formats=_formats_help(), optimizers=", ".join(e.name for e in REGISTRY.entries("optimizer")))
@click.option("--quiet", "-q", is_flag=True, help="Print only the verdict line and errors.")
@click.option("--verbose", "-v", is_flag=True, help="Print every check, stage, benchmark and candidate, not one line per artifact.")
def export_command(model, quiet, verbose, **values):
    """Export MODEL to each format in --to and validate every artifact against MODEL.

    MODEL is a model file (.pt2, TorchScript, a pickled module, .keras, .h5, .onnx), a SavedModel folder,
    package.module:callable or path/to/file.py:callable returning the model, or (with --framework jax) a JAX function
    f(params, *inputs).
    """
    keywords = options.from_cli(values)
    _start_worker_ahead(model, keywords)
    from convert.pipeline import ConvertRequest

    _run_and_exit(ConvertRequest(model=model, **keywords, command=shlex.join(["convert", *sys.argv[1:]])), quiet, verbose)


@main.command("validate", cls=_RunCommand)
@click.argument("artifacts", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--against",
    "model",
    required=True,
    metavar="MODEL",
    help="The source model, given as to the default command (a file, folder or factory).",
)
@options.click_options(tuple(o.name for o in options.OPTIONS if o.name not in options.MAKES_ARTIFACTS))
@click.option("--quiet", "-q", is_flag=True, help="Print only the verdict line and errors.")
@click.option("--verbose", "-v", is_flag=True, help="Print every check, stage, benchmark and candidate, not one line per artifact.")
def validate_command(artifacts, model, quiet, verbose, **values):
    """Validate ARTIFACTS you already have (made by this tool, another exporter or by hand) against the source MODEL.

    Each artifact (.onnx, .pt2, .pte, .tflite, a TorchScript archive, a SavedModel or OpenVINO folder) is checked as it
    is, with the same specs, shapes, runtimes, devices, metrics, report and exit codes as a conversion; it is never
    moved or changed. The report names it by its file name.
    """
    keywords = options.from_cli(values)
    _start_worker_ahead(model, keywords)
    from convert.artifacts import given_by_name
    from convert.pipeline import ConvertRequest

    request = ConvertRequest(
        model=model,
        to=(),
        given=_guarded(lambda: given_by_name(artifacts)),
        **keywords,
        command=shlex.join(["convert", *sys.argv[1:]]),
    )
    _run_and_exit(request, quiet, verbose)


def _start_worker_ahead(model: str, keywords: dict) -> None:
    """Start the run's worker process now: it imports what loading the model takes while this process imports the
    pipeline and plans the run."""
    from convert.worker import isolates, start_ahead

    if isolates(keywords["isolate"]):
        start_ahead(model, keywords["framework"])


def _run_and_exit(request, quiet: bool, verbose: bool) -> None:
    """Run the pipeline with progress on the terminal, print the summary and every failure, exit with the run's code."""
    from convert.pipeline import run
    from convert.reports.console import print_failures, print_summary, stdout_console

    stdout = stdout_console()
    result = _guarded(lambda: run(request, None if quiet else _ConsoleProgress()))

    if quiet:
        from convert.reports.facts import run_outcome

        outcome = run_outcome(result.report)
        stdout.print(
            outcome.word
            + (f" — {escape(outcome.not_built)}" if outcome.not_built else "")
            + f" (exit code {result.exit_code}) — report: {escape(str(result.report_path))}",
            soft_wrap=True,
        )
    else:
        log = str(result.log_path) if result.log_path else None
        print_summary(result.report, stdout, str(result.report_path), verbose=verbose, log_path=log)
    print_failures(result.report, stderr, str(result.report_path))
    sys.exit(result.exit_code)


@main.command("gate")
@click.argument("policy", type=click.Path(path_type=Path))
@click.option(
    "--baseline",
    type=click.Path(path_type=Path),
    default=None,
    help="The report.json of the last promoted model to compare with (overrides the policy's baseline.report).",
)
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path),
    default=None,
    help="Output folder for the artifacts and report.json (overrides the policy's out).",
)
@click.option("--junit", type=click.Path(path_type=Path), default=None, help="Write the report as JUnit XML here.")
@click.option(
    "--markdown",
    type=click.Path(path_type=Path),
    default=None,
    help="Write the report as Markdown here (appended when it is $GITHUB_STEP_SUMMARY).",
)
@click.option("--html", type=click.Path(path_type=Path), default=None, help="Write the report as a self-contained HTML page here.")
@click.option(
    "--mlflow",
    "log_mlflow",
    is_flag=True,
    help="Log the verdict, metrics, report and artifacts as a run to the MLflow tracking URI in effect.",
)
@click.option("--force", is_flag=True, help="Replace what an earlier run wrote in the output folder (never the model or any other input).")
@_cache_options
@click.option("--quiet", "-q", is_flag=True, help="Print only the decision, its reasons and errors.")
@click.option("--verbose", "-v", is_flag=True, help="Print every check, stage, benchmark and candidate, not one line per artifact.")
def gate_command(policy, baseline, out, junit, markdown, html, log_mlflow, force, cache_dir, no_cache, quiet, verbose):
    """Run the conversion a promotion POLICY (YAML) describes and judge the model against it.

    \b
    Exit codes: 0 promote; 1 rejected (every reason is printed and in the report);
    2 bad policy, baseline or input; 3 internal error.
    """
    from convert.gate.run import gate
    from convert.reports.console import print_summary, print_verdict, stdout_console
    from convert.reports.model import Report

    verdict = _guarded(
        lambda: gate(
            policy,
            baseline=baseline,
            out=out,
            force=force,
            html=html,
            markdown=markdown,
            junit=junit,
            mlflow=log_mlflow,
            cache=not no_cache,
            cache_dir=cache_dir,
            progress=None if quiet else _ConsoleProgress(),
            command=shlex.join(["convert", *sys.argv[1:]]),
        )
    )
    stdout = stdout_console()

    def show() -> None:
        if not quiet:
            report = Report.from_json(Path(verdict.report).read_text(), f"the report {verdict.report}")
            print_summary(report, stdout, verdict=False, verbose=verbose)
        print_verdict(verdict, stdout, tables=not quiet)

    _guarded(show)  # a failure to print must not exit 1, which means 'rejected'
    sys.exit(verdict.exit_code)


@main.command("batch")
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option(
    "--workers",
    type=int,
    default=1,
    show_default=True,
    help="Models converted at a time on this machine (each in its own process; local engine).",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Run the models as processes here, or as Ray tasks (pip install 'model-convert[ray]').",
)
@click.option(
    "--address",
    default=None,
    metavar="ADDRESS",
    help="The Ray cluster to run on ('auto': the one 'ray start' started here); default: a new local instance.",
)
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path),
    default=None,
    help="The batch's folder: OUT/NAME/ per model and OUT/summary.json (overrides the manifest's out).",
)
@click.option(
    "--force", is_flag=True, help="Replace what an earlier batch wrote: the summary and the models' artifacts and reports (never an input)."
)
@_cache_options
@click.option("--quiet", "-q", is_flag=True, help="Print only the summary line and errors.")
def batch_command(manifest, workers, engine, address, out, force, cache_dir, no_cache, quiet):
    """Convert and gate every model of a MANIFEST (YAML: the promotion policy's keys per model), one report each and a
    summary. A model that fails, is rejected or crashes does not stop the others.

    \b
    Exit codes: 0 every model promoted; 1 a model was rejected, failed or crashed (the summary says which and why);
    2 bad manifest or options (nothing ran); 3 internal error; 130 interrupted.
    """
    from convert.batch import print_batch, print_batch_progress, run_batch
    from convert.reports.console import stdout_console

    stdout = stdout_console()

    def finished(outcome) -> None:
        if not quiet:
            print_batch_progress(outcome, stderr)

    summary, path = _guarded(
        lambda: run_batch(
            manifest,
            out=out,
            workers=workers,
            engine=engine,
            address=address,
            force=force,
            cache=not no_cache,
            cache_dir=cache_dir,
            command=shlex.join(["convert", *sys.argv[1:]]),
            finished=finished,
        )
    )
    print_batch(summary, stdout, str(path), table=not quiet)
    sys.exit(summary.exit_code)


@main.command("report")
@click.argument("report_json", type=click.Path(path_type=Path))
@click.option("--html", type=click.Path(path_type=Path), default=None, help="Write a self-contained HTML page here.")
@click.option(
    "--markdown", type=click.Path(path_type=Path), default=None, help="Write Markdown here (appended when it is $GITHUB_STEP_SUMMARY)."
)
@click.option("--junit", type=click.Path(path_type=Path), default=None, help="Write JUnit XML here.")
@click.option("--verbose", "-v", is_flag=True, help="Print every check, stage, benchmark and candidate, not one line per artifact.")
def report_command(report_json, html, markdown, junit, verbose):
    """Render a JSON report (from convert or convert gate) as HTML, Markdown or JUnit XML; with none of them, print it."""
    from convert.gate.baseline import load_report
    from convert.reports.console import print_summary, print_verdict, stdout_console
    from convert.reports.render import render_files

    report = _guarded(lambda: load_report(report_json, "report"))
    stdout = stdout_console()
    if html is None and markdown is None and junit is None:
        print_summary(report, stdout, str(report_json), verdict=report.gate is None, verbose=verbose)
        if report.gate is not None:
            print_verdict(report.gate, stdout)
        return
    for path in _guarded(lambda: render_files(report, html=html, markdown=markdown, junit=junit)):
        stdout.print(f"wrote {escape(str(path))}")


@main.command("doctor")
def doctor_command():
    """Show which frameworks, runtimes and devices are usable here, with versions."""
    from convert import doctor
    from convert.reports.console import stdout_console

    console = stdout_console()
    for title, rows in (
        ("Frameworks and tools", doctor.package_rows()),
        ("Runtimes", doctor.runtime_rows()),
        ("Devices", doctor.device_rows()),
    ):
        table = Table(title=title)
        for column in ("name", "version", "status", "detail"):
            table.add_column(column, overflow="fold")
        for row in rows:
            color = "green" if row.status in ("installed", "usable", "present") else "yellow"
            table.add_row(escape(row.name), row.version, f"[{color}]{row.status}[/]", escape(row.detail))
        console.print(table)


class _ConsoleProgress:
    """Stage events on stderr, one line per finished stage: on a terminal a transient spinner names the stage that runs
    meanwhile (an export may take minutes); anywhere else (a CI log, a file) only the finished lines, each once. Why a
    stage was skipped is left to the summary, which says each reason once however many stages it skipped."""

    def __init__(self) -> None:
        self._spinner = None  # the running stage's rich Status, on a terminal

    def started(self, name: str) -> None:
        if stderr.is_terminal:
            self._spinner = stderr.status(f"[dim]{escape(name)}[/]")
            self._spinner.start()

    def finished(self, stage, detail: str = "") -> None:
        if self._spinner is not None:
            self._spinner.stop()
            self._spinner = None
        mark = {"ok": "[green]✓[/]", "failed": "[red]✗[/]", "skipped": "[yellow]-[/]"}[stage.status]
        note = " [dim]skipped[/]" if stage.status == "skipped" else " [dim]reused from the cache[/]" if stage.reused else ""
        stderr.print(f"{mark} {escape(stage.name)} ({stage.seconds:.1f} s){note}", soft_wrap=True)


def _guarded(action):
    """Run the action; a user error is one paragraph and exit 2, anything unexpected keeps its traceback (exit 3)."""
    try:
        return action()
    except ConvertError as exc:
        stderr.print(f"[bold red]error:[/] {escape(exc.paragraph())}", soft_wrap=True)
        sys.exit(EXIT_USER)
    except KeyboardInterrupt:
        stderr.print("[bold red]interrupted[/]: nothing was left at a final path.")
        sys.exit(130)
    except Exception:
        traceback.print_exc()
        stderr.print("[bold red]internal error[/]: this is a bug in convert, not in your model; please report it with the traceback above.")
        sys.exit(EXIT_INTERNAL)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def run_cli() -> None:
    signal.signal(signal.SIGTERM, _raise_interrupt)
    main()
