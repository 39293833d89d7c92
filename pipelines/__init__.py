"""Pass registry, pipelines as data, and kiln's named pipelines."""

from .pipeline import Pipeline, Stage, parse_pipeline_text  # noqa: F401
from .registry import Option, Pass, get_pass, load_passes, register_pass, registered_passes  # noqa: F401
