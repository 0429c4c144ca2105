"""python -m remedy.state_schema: regenerate state.schema.json from the models."""

from remedy.state_schema.io import write_schema_file

if __name__ == "__main__":
    print(write_schema_file())
