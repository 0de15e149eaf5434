"""The scheduling recipes in examples/schedule/ act on chunkline's exit statuses as the "Exit codes"
table of docs/operations.md says: what they retry is exactly the table's "retry" rows (the constants of
pipeline/exits.py), 1 and 2 are never retried, and every Flex Template parameter reaches a real
`chunkline run` option or config key. Airflow is not a dependency: the DAG is read as source."""

from __future__ import annotations

import ast
import configparser
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from chunkline.pipeline import exits
from chunkline.pipeline.cli import build_parser
from chunkline.pipeline.config import load_config

ROOT = Path(__file__).resolve().parents[1]
SCHEDULE = ROOT / "examples" / "schedule"
NEVER_RETRIED = {exits.NOT_DONE, exits.USAGE}


def readme_exit_codes() -> dict[int, str]:
    """The "Exit codes" table of docs/operations.md: each code and what a scheduler should do on
    it."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    lines = text[text.index("Exit codes (`pipeline/exits.py`)"):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    actions = {}
    for row in lines[start:]:
        if not row.startswith("|"):
            break
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if cells[0].isdigit():
            actions[int(cells[0])] = cells[-1]
    return actions


README_CODES = readme_exit_codes()
RETRYABLE = {code for code, action in README_CODES.items() if action.startswith("retry")}


def test_the_readme_table_retries_exactly_the_exits_constants():
    assert RETRYABLE == {exits.BUSY, exits.PUBLISHED_SINK_FAILED, exits.STORE_UNAVAILABLE}
    assert not RETRYABLE & NEVER_RETRIED


# --- Airflow -----------------------------------------------------------------------------------

DAG_FILE = SCHEDULE / "airflow_dag.py"


def dag_constants(tree: ast.Module) -> dict[str, int]:
    return {node.targets[0].id: node.value.value for node in tree.body
            if isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Constant)
            and type(node.value.value) is int}


def dag_outcome():
    """The DAG's ``outcome`` function, compiled with its constants alone (no Airflow here)."""
    tree = ast.parse(DAG_FILE.read_text(encoding="utf-8"), filename=str(DAG_FILE))
    names = dag_constants(tree)
    body = [node for node in tree.body
            if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in names)
            or (isinstance(node, ast.FunctionDef) and node.name == "outcome")]
    namespace: dict = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(DAG_FILE), "exec"), namespace)
    return namespace["outcome"]


def test_airflow_dag_names_only_the_retryable_exit_codes():
    tree = ast.parse(DAG_FILE.read_text(encoding="utf-8"), filename=str(DAG_FILE))
    constants = dag_constants(tree)
    # Each number the DAG names is pipeline/exits.py's, under exits.py's name ...
    assert constants == {name: getattr(exits, name, None) for name in constants}
    # ... and they are the README's retryable codes, no more, no fewer.
    assert set(constants.values()) == RETRYABLE
    # The decision uses those names alone: no other status (1, 2) is special-cased in it.
    outcome = next(node for node in tree.body
                   if isinstance(node, ast.FunctionDef) and node.name == "outcome")
    numbers = {node.value for node in ast.walk(outcome)
               if isinstance(node, ast.Constant) and type(node.value) is int}
    assert numbers <= {exits.OK}


@pytest.mark.parametrize("code", sorted(set(README_CODES) | {137}))
def test_airflow_dag_retries_what_the_readme_retries(code):
    outcome = dag_outcome()
    run, sync = outcome("run", code), outcome("sync", code)
    if code == exits.OK:
        assert (run, sync) == ("ok", "ok")
    elif code == exits.PUBLISHED_SINK_FAILED:
        assert run == "sync"  # the index is published: the sync task completes the sink
    elif code == exits.BUSY:
        assert (run, sync) == ("retry", "retry")
    elif code == exits.STORE_UNAVAILABLE:  # a sync status; `chunkline run` reports a store as 3
        assert (run, sync) == ("fail", "retry")
    else:
        assert (run, sync) == ("fail", "fail")


# --- Dataflow Flex Template --------------------------------------------------------------------

DATAFLOW = SCHEDULE / "dataflow"
# One valid value per template parameter; each must match the parameter's own regexes.
SAMPLES = {
    "config": str(ROOT / "configs" / "dataflow.yaml"),
    "input": "gs://bucket/corpus/**",
    "output": "gs://bucket/index",
    "previous": "gs://bucket/older-index",
    "allow_shrink": "true",
    "chunk_shards": "64",
    "vector_dtype": "int8",
    "embed_batch_size": "32",
}
BEAM_ARGS = ["--project=p", "--region=europe-west1", "--job_name=nightly",
             "--temp_location=gs://bucket/tmp"]


@pytest.fixture(scope="module")
def launcher():
    spec = importlib.util.spec_from_file_location("chunkline_flex_launch", DATAFLOW / "launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def template_parameters() -> list[dict]:
    metadata = json.loads((DATAFLOW / "metadata.json").read_text(encoding="utf-8"))
    assert metadata["name"] and metadata["description"]
    return metadata["parameters"]


def test_flex_template_metadata_is_well_formed(template_parameters):
    names = [parameter["name"] for parameter in template_parameters]
    assert len(names) == len(set(names))
    for parameter in template_parameters:
        assert {"name", "label", "helpText", "isOptional", "regexes"} <= set(parameter)
        assert isinstance(parameter["isOptional"], bool)
        assert all(re.compile(regex) for regex in parameter["regexes"])
        sample = SAMPLES[parameter["name"]]
        assert all(re.fullmatch(regex, sample) for regex in parameter["regexes"]), parameter["name"]


def test_every_flex_template_parameter_is_a_run_option_or_a_config_key(launcher,
                                                                      template_parameters):
    assert {parameter["name"] for parameter in template_parameters} == set(launcher.PARAMETERS)
    argv = launcher.command_line([f"--{name}={SAMPLES[name]}" for name in launcher.PARAMETERS]
                                 + BEAM_ARGS)
    dash = argv.index("--")
    assert argv[dash + 1:] == BEAM_ARGS  # the launcher's own options go to Beam, in order
    args = build_parser().parse_args(argv[:dash])  # SystemExit on an option `run` does not have
    assert args.command == "run"
    config = load_config(args.config, args.set)  # ConfigError on a key config.py does not know
    for name, (kind, target) in launcher.PARAMETERS.items():
        if kind == "set":
            value = config
            for part in target.split("."):
                value = getattr(value, part)
            assert value == yaml.safe_load(SAMPLES[name]), name
        else:
            parsed = getattr(args, target.lstrip("-").replace("-", "_"))
            assert parsed == (True if kind == "flag" else SAMPLES[name]), name


def test_flex_launcher_flag_parameters(launcher):
    assert "--allow-shrink" not in launcher.command_line(["--allow_shrink=false"])
    with pytest.raises(ValueError, match="true or false"):
        launcher.command_line(["--allow_shrink=yes"])


def test_flex_launcher_passes_chunkline_status_through(launcher):
    seen = []
    status = launcher.main(["--output=gs://bucket/index", *BEAM_ARGS],
                           run=lambda argv: seen.append(argv) or exits.BUSY)
    assert status == exits.BUSY
    assert seen == [["run", "--config", launcher.DEFAULT_CONFIG, "--output", "gs://bucket/index",
                     "--", *BEAM_ARGS]]
    # With chunkline's real CLI: a config that is not there is a usage error, before any work.
    assert launcher.main([f"--config={ROOT}/configs/no-such.yaml"]) == exits.USAGE


def test_flex_launcher_refuses_a_graph_only_launch(launcher, capsys):
    seen = []
    status = launcher.main(["--output=gs://bucket/index", *BEAM_ARGS,
                            "--template_location=gs://bucket/staging/job_object"], run=seen.append)
    assert (status, seen) == (exits.USAGE, [])
    assert "--template_location" in capsys.readouterr().err


# --- systemd -----------------------------------------------------------------------------------

def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string((SCHEDULE / name).read_text(encoding="utf-8"), source=name)
    return parser


def statuses(value: str) -> set[int | str]:
    return {int(word) if word.isdigit() else word for word in value.split()}


def test_systemd_run_unit_restarts_on_busy_and_hands_a_lagging_sink_to_the_sync_unit():
    service = unit("chunkline-nightly.service")["Service"]
    assert service["Type"] != "oneshot"  # systemd refuses RestartForceExitStatus= on oneshot
    assert "chunkline run --config" in service["ExecStart"]
    assert service["Restart"] == "no"  # only the listed statuses restart
    assert statuses(service["RestartForceExitStatus"]) == {exits.BUSY}
    success = statuses(service["SuccessExitStatus"])
    assert exits.PUBLISHED_SINK_FAILED in success and not success & NEVER_RETRIED
    handoff = re.search(r'"\$\$EXIT_STATUS" = (\d+) \]; '
                        r'then exec systemctl start --no-block ([\w@.-]+);', service["ExecStopPost"])
    assert handoff and int(handoff[1]) == exits.PUBLISHED_SINK_FAILED
    assert handoff[2] == "chunkline-sync.service" and (SCHEDULE / handoff[2]).is_file()


def test_systemd_sync_unit_retries_an_unreachable_or_locked_store():
    sync = unit("chunkline-sync.service")
    service = sync["Service"]
    assert "chunkline sync ${CHUNKLINE_OUTPUT} --to ${CHUNKLINE_SINK}" in service["ExecStart"]
    assert service["Restart"] == "no"
    assert statuses(service["RestartForceExitStatus"]) == {exits.STORE_UNAVAILABLE, exits.BUSY}
    assert not statuses(service["SuccessExitStatus"]) & NEVER_RETRIED
    assert not sync.has_section("Install")  # started only by the run unit


def test_systemd_units_retry_exactly_the_retryable_codes_and_page_on_the_rest():
    run, sync = unit("chunkline-nightly.service"), unit("chunkline-sync.service")
    handed_off = int(re.search(r'"\$\$EXIT_STATUS" = (\d+)', run["Service"]["ExecStopPost"])[1])
    retried = (statuses(run["Service"]["RestartForceExitStatus"]) | {handed_off}
               | statuses(sync["Service"]["RestartForceExitStatus"]))
    assert retried == RETRYABLE == {exits.BUSY, exits.PUBLISHED_SINK_FAILED, exits.STORE_UNAVAILABLE}
    for parsed in (run, sync):
        assert parsed["Unit"]["OnFailure"] == "chunkline-notify@%N.service"
        assert int(parsed["Unit"]["StartLimitBurst"]) >= 1  # retries end, and then the page
    assert (SCHEDULE / "chunkline-notify@.service").is_file()
    timer = unit("chunkline-nightly.timer")
    assert timer["Timer"]["Unit"] == "chunkline-nightly.service" and timer["Timer"]["OnCalendar"]
    assert timer["Install"]["WantedBy"] == "timers.target"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verifies_the_units(tmp_path):
    # verify checks that ExecStart= programs exist: point the units at one that does.
    for path in SCHEDULE.glob("chunkline-*"):
        text = path.read_text(encoding="utf-8")
        (tmp_path / path.name).write_text(
            text.replace("/opt/chunkline/.venv/bin/chunkline", shutil.which("true")), encoding="utf-8")
    notify = tmp_path / "chunkline-notify@chunkline-nightly.service"
    notify.write_text((tmp_path / "chunkline-notify@.service").read_text(), encoding="utf-8")
    names = ["chunkline-nightly.service", "chunkline-nightly.timer", "chunkline-sync.service",
             notify.name]
    result = subprocess.run(["systemd-analyze", "verify", *(f"./{n}" for n in names)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    # Unknown keys are only warnings (exit 0): any output at all is a finding.
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


# --- cron wrapper ------------------------------------------------------------------------------

SCRIPT = SCHEDULE / "nightly.sh"
RUN = "run --config c.yaml --output out"
SYNC = "sync out --to sink"
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ chunkline-nightly: ([a-z-]+): ")
FAKE_CHUNKLINE = """#!/usr/bin/env bash
# Test double for the exit status only: records its arguments, exits with the next listed code.
echo "$*" >> "$FAKE_CALLS"
echo "fake chunkline output"
code=$(head -n 1 "$FAKE_CODES")
sed -i 1d "$FAKE_CODES"
exit "$code"
"""


def test_nightly_script_parses_and_names_exits_constants():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=10)
    lines = SCRIPT.read_text(encoding="utf-8").splitlines()
    line = next(line for line in lines if line.startswith("readonly "))
    named = dict(pair.split("=") for pair in line.split()[1:])
    assert {name: int(value) for name, value in named.items()} == {
        name: getattr(exits, name, None) for name in named}


@pytest.fixture
def nightly(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "chunkline"
    fake.write_text(FAKE_CHUNKLINE, encoding="utf-8")
    fake.chmod(0o755)

    def run(codes, **env):
        (tmp_path / "codes").write_text("".join(f"{code}\n" for code in codes), encoding="utf-8")
        (tmp_path / "calls").write_text("", encoding="utf-8")
        variables = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                     "FAKE_CODES": str(tmp_path / "codes"), "FAKE_CALLS": str(tmp_path / "calls"),
                     "CHUNKLINE_CONFIG": "c.yaml", "CHUNKLINE_OUTPUT": "out",
                     "CHUNKLINE_SINK": "sink", "CHUNKLINE_ATTEMPTS": "2",
                     "CHUNKLINE_RETRY_DELAY": "0"}
        variables.update(env)
        variables = {k: v for k, v in variables.items() if v is not None}
        result = subprocess.run([str(SCRIPT)], env=variables, capture_output=True, text=True,
                                timeout=30)
        calls = (tmp_path / "calls").read_text(encoding="utf-8").splitlines()
        return result, calls

    run.tmp_path = tmp_path
    return run


def actions(output: str) -> list[str]:
    return [m[1] for m in map(LINE.match, output.splitlines()) if m]


OK, NOT_DONE, USAGE, SINK_LAGS, UNREACHABLE, BUSY, INTERRUPTED = (
    exits.OK, exits.NOT_DONE, exits.USAGE, exits.PUBLISHED_SINK_FAILED, exits.STORE_UNAVAILABLE,
    exits.BUSY, exits.INTERRUPTED)


# chunkline's statuses in turn -> the script's status, its decisions, the commands it ran
SCRIPT_CASES = [
    ([OK], OK, ["ok"], [RUN]),
    ([NOT_DONE], NOT_DONE, ["page"], [RUN]),
    ([USAGE], USAGE, ["page"], [RUN]),
    ([BUSY, OK], OK, ["retry-later", "ok"], [RUN, RUN]),
    ([BUSY, BUSY], BUSY, ["retry-later", "page"], [RUN, RUN]),  # attempts spent: a person looks
    ([SINK_LAGS, OK], OK, ["sync", "ok"], [RUN, SYNC]),  # the run is not repeated
    ([SINK_LAGS, UNREACHABLE, OK], OK, ["sync", "retry-later", "ok"], [RUN, SYNC, SYNC]),
    ([SINK_LAGS, BUSY, UNREACHABLE], UNREACHABLE, ["sync", "retry-later", "page"], [RUN, SYNC, SYNC]),
    ([SINK_LAGS, NOT_DONE], NOT_DONE, ["sync", "page"], [RUN, SYNC]),
    ([SINK_LAGS, USAGE], USAGE, ["sync", "page"], [RUN, SYNC]),
    ([UNREACHABLE], UNREACHABLE, ["page"], [RUN]),  # `chunkline run` never exits 69 (a store is 3)
    ([INTERRUPTED], INTERRUPTED, ["interrupted"], [RUN]),
    ([137], 137, ["page"], [RUN]),  # killed (OOM): not a status chunkline documents
]


@pytest.mark.parametrize("codes, status, decided, calls", SCRIPT_CASES,
                         ids=["-".join(map(str, case[0])) for case in SCRIPT_CASES])
def test_nightly_script_maps_each_status_to_its_action(nightly, codes, status, decided, calls):
    result, made = nightly(codes)
    assert result.returncode == status, result.stdout + result.stderr
    assert actions(result.stdout) == decided  # one line per decision
    assert made == calls


def test_nightly_script_pages_on_a_lagging_sink_it_cannot_sync(nightly):
    result, made = nightly([SINK_LAGS], CHUNKLINE_SINK=None)
    assert (result.returncode, actions(result.stdout), made) == (SINK_LAGS, ["page"], [RUN])
    assert "chunkline sync OUTPUT --to SINK" in result.stdout


def test_nightly_script_with_a_log_sends_only_pages_to_cron(nightly):
    log = nightly.tmp_path / "nightly.log"
    page_file = nightly.tmp_path / "paged"
    pager = nightly.tmp_path / "bin" / "pager"
    pager.write_text(f'#!/usr/bin/env bash\necho "$1" >> {page_file}\n', encoding="utf-8")
    pager.chmod(0o755)

    quiet, _ = nightly([BUSY, OK], CHUNKLINE_LOG=str(log), CHUNKLINE_PAGE=str(pager))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (OK, "", "")
    assert not page_file.exists()

    loud, _ = nightly([USAGE], CHUNKLINE_LOG=str(log), CHUNKLINE_PAGE=str(pager))
    assert (loud.returncode, loud.stdout) == (USAGE, "")
    assert loud.stderr.startswith("chunkline-nightly: page: run exit 2 ")
    assert loud.stderr.count("\n") == 1
    assert page_file.read_text(encoding="utf-8") == loud.stderr
    logged = log.read_text(encoding="utf-8")
    assert actions(logged) == ["retry-later", "ok", "page"]
    assert logged.count("fake chunkline output") == 3  # chunkline's own output is in the log too
