from convert.cli import run_cli

run_cli()
