"""The front door: `remedy <command>`. main.py parses the command line and dispatches; each
group of commands has its module (prefect_commands, debugger_commands, report_commands,
repro_commands), beside what they share (errors, the local server, the watchdog)."""

from remedy.cli.main import main

__all__ = ["main"]
