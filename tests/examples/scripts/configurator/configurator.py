# A "poor man's configurator" in the style of GPT training repositories: exec'd by train.py.
# Each argument is a config file (Python, exec'd over the defaults) or a --key=value
# override of a default, whose type it must keep; anything else is refused.
import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    if "=" not in arg:
        assert not arg.startswith("--"), f"not a config file, and not --key=value: {arg}"
        print(f"config file {arg}")
        with open(arg) as config_file:
            exec(config_file.read())
    else:
        assert arg.startswith("--"), f"an override is --key=value: {arg}"
        key, value = arg[2:].split("=", 1)
        if key not in globals():
            raise ValueError(f"unknown config key: {key}")
        try:
            parsed = literal_eval(value)  # True, 0.1, 20, [1, 2]
        except (SyntaxError, ValueError):
            parsed = value  # a plain string
        assert type(parsed) is type(globals()[key]), (
            f"{key}: {parsed!r} is not a {type(globals()[key]).__name__}"
        )
        print(f"override {key} = {parsed!r}")
        globals()[key] = parsed
