"""The template's entry point (FLEX_TEMPLATE_PYTHON_PY_FILE): its parameters as a
``chunkline run`` command line, run by chunkline's own CLI (``chunkline.pipeline.cli.main``), whose exit
status it exits with (pipeline/exits.py).

Each parameter of metadata.json is a ``chunkline run`` option or a ``--set`` config override
(:data:`PARAMETERS`). Every other argument (the launcher's ``--project``, ``--region``,
``--job_name``, ``--temp_location``, ``--sdk_container_image`` ...) goes to Beam after ``--``,
after the config's own runner options, so a launch's value wins.

chunkline publishes (reconciles the counts, writes the manifest, switches LATEST, syncs the
sink) from the process that started the job, after the job, under the output's lease. A launch
that passes ``--template_location`` asks only for the job's graph, for Dataflow to start once
this process has exited: nothing would then publish the run, so it is refused before any work
(exit 2). Run the same image as the job's driver instead, with the same parameters::

    docker run --entrypoint python IMAGE /template/launch.py --output=gs://b/index \\
        --project=p --region=europe-west1

(or as a Cloud Run job, a Kubernetes CronJob, Composer's KubernetesPodOperator).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from chunkline.pipeline import exits

DEFAULT_CONFIG = "/template/configs/dataflow.yaml"

# Template parameter -> how it reaches `chunkline run`: ("option", FLAG) passes the value to that
# option; ("flag", FLAG) passes the flag for "true" and nothing for "false"; ("set", KEY) is
# `--set KEY=VALUE`, the value read as YAML like any --set.
PARAMETERS: dict[str, tuple[str, str]] = {
    "config": ("option", "--config"),
    "input": ("option", "--input"),
    "output": ("option", "--output"),
    "previous": ("option", "--previous"),
    "allow_shrink": ("flag", "--allow-shrink"),
    "chunk_shards": ("set", "output.chunk_shards"),
    "vector_dtype": ("set", "output.vector_dtype"),
    "embed_batch_size": ("set", "embed.batch_size"),
}


def command_line(argv: Sequence[str]) -> list[str]:
    """The ``chunkline`` arguments for the template's ``--name=value`` arguments ``argv``.
    Raises ValueError for a flag parameter that is neither true nor false."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name in PARAMETERS:
        parser.add_argument(f"--{name}")
    known, beam_args = parser.parse_known_args(list(argv))
    args = ["run", "--config", known.config or DEFAULT_CONFIG]
    for name, (kind, target) in PARAMETERS.items():
        value = getattr(known, name)
        if value is None or name == "config":
            continue
        if kind == "option":
            args += [target, value]
        elif kind == "flag":
            if value not in ("true", "false"):
                raise ValueError(f"--{name} must be true or false, got {value!r}")
            args += [target] if value == "true" else []
        else:
            args += ["--set", f"{target}={value}"]
    return args + (["--", *beam_args] if beam_args else [])


def main(argv: Sequence[str] | None = None, run: Callable[[list[str]], int] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(arg.split("=", 1)[0] == "--template_location" for arg in argv):
        print("chunkline launch: refused a launch with --template_location: it only writes the "
              "job's graph, and chunkline publishes the index from this process after the job; "
              "nothing was started. Run this image as the job's driver (launch.py's docstring).",
              file=sys.stderr)
        return exits.USAGE
    try:
        args = command_line(argv)
    except ValueError as exc:
        print(f"chunkline launch: {exc}", file=sys.stderr)
        return exits.USAGE
    if run is None:
        from chunkline.pipeline.cli import main as run
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
