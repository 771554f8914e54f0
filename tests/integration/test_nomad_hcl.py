"""``nomad/coach-stream.nomad.hcl`` and ``--dry-run --format hcl`` agree with the JSON job.

The HCL is parsed with python-hcl2 and turned back into the API's JSON form the way
Nomad's jobspec2 parser does for the constructs the file uses (blocks, ``var.*``
references, durations, one ``dynamic "template"`` block), then compared with the job that
``build_job`` makes from the same settings: equal, key for key.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import hcl2
import pytest
from hcl2.utils import SerializationOptions
from nomad_double import check_job

from coach_stream.orchestrators import LaunchSettings, build_run_spec
from coach_stream.orchestrators.nomad_job import (
    _BLOCKS,
    _RENAMES,
    SECOND_NS,
    NomadJobSettings,
    build_job,
    job_env,
    job_hcl,
)

HCL_FILE = Path(__file__).resolve().parents[2] / "nomad" / "coach-stream.nomad.hcl"
OPTIONS = SerializationOptions(strip_string_quotes=True, explicit_blocks=False, with_comments=False)
BLOCK_KEYS = {hcl: key for key, hcl in _BLOCKS.items()}
ATTR_KEYS = {hcl: key for key, hcl in _RENAMES.items()}
DURATIONS = {"Interval", "Delay", "MaxDelay", "KillTimeout"}
VERBATIM = {"Config", "Env", "Meta"}
SECRETS_FOR_EACH = '${var.secrets_var == "" ? [] : [var.secrets_var]}'


def _camel(name: str) -> str:
    return ATTR_KEYS.get(name) or "".join(part.capitalize() for part in name.split("_"))


def _value(value: Any, variables: dict[str, Any], key: str = "", item: bool = False) -> Any:
    if isinstance(value, list):
        return [_value(v, variables, item=True) for v in value]
    if not isinstance(value, str):
        return value
    whole = re.fullmatch(r"\$\{(var|template)\.(\w+)\}", value)
    if whole:
        found = variables[f"{whole[1]}.{whole[2]}"]
        # "${var.workers}" in a list of strings (args) is the number's text, as in Nomad.
        return str(found) if item and not isinstance(found, str) else found
    text = re.sub(r"\$\{(var|template)\.(\w+)\}", lambda m: str(variables[f"{m[1]}.{m[2]}"]), value)
    if key in DURATIONS:
        return int(float(text.removesuffix("s")) * SECOND_NS)
    return text


def _body(hcl: dict[str, Any], variables: dict[str, Any], verbatim: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in hcl.items():
        if verbatim:
            out[name] = _value(value, variables)
        elif name == "dynamic":
            for block in value:
                ((kind, spec),) = block.items()
                assert (kind, spec["for_each"]) == ("template", SECRETS_FOR_EACH)
                secret = variables["var.secrets_var"]
                for item in [secret] if secret else []:
                    inner = {**variables, "template.value": item}
                    rendered = [_body(c, inner) for c in spec["content"]]
                    out.setdefault("Templates", []).extend(rendered)
        elif (
            name in BLOCK_KEYS and isinstance(value, list) and value and isinstance(value[0], dict)
        ):
            key = BLOCK_KEYS[name]
            items = []
            for block in value:
                if name in {"group", "task", "device", "port"}:
                    ((label, inner),) = block.items()
                    named = "Label" if name == "port" else "Name"
                    items.append({named: label, **_body(inner, variables)})
                else:
                    items.append(_body(block, variables, verbatim=key in VERBATIM))
            many = key in {
                "TaskGroups",
                "Tasks",
                "Devices",
                "Templates",
                "Spreads",
                "Networks",
                "DynamicPorts",
            }
            out[key] = items if many else items[0]
        else:
            key = {"id": "ID", "env": "Envvars"}.get(name) or _camel(name)
            out[key] = _value(value, variables, key)
    return out


def hcl_job(text: str, variables: dict[str, Any]) -> dict[str, Any]:
    parsed = hcl2.loads(text, serialization_options=OPTIONS)
    ((label, body),) = parsed["job"][0].items()
    job = _body(body, variables)
    job.setdefault("ID", label)
    for group in job["TaskGroups"]:
        for task in group["Tasks"]:
            task["Env"] = {k: v for k, v in task["Env"].items() if v != ""}  # unset = empty
    return {"ID": job.pop("ID"), **job}


def defaults(text: str) -> dict[str, Any]:
    parsed = hcl2.loads(text, serialization_options=OPTIONS)
    found: dict[str, Any] = {}
    for block in parsed["variable"]:
        ((name, spec),) = block.items()
        if "default" in spec:
            found[f"var.{name}"] = spec["default"]
    return found


@pytest.mark.parametrize("secrets_var", ["", "nomad/jobs/coach-stream-hcl-1"])
@pytest.mark.parametrize("gcs_emulator", [None, "http://gcs.internal:4443"])
def test_the_nomad_folder_jobspec_is_the_dry_run_job(
    secrets_var: str, gcs_emulator: str | None
) -> None:
    text = HCL_FILE.read_text()
    settings = LaunchSettings(
        preset="cartpole-ppo",
        run_id="hcl-1",
        workers=3,
        kafka_bootstrap="kafka.internal:9092",
        checkpoints="gs://bucket/runs",
        python="python3",
    )
    job = build_job(
        build_run_spec(settings),
        NomadJobSettings(
            env=job_env(settings.kafka_bootstrap, gcs_emulator), secrets_var=secrets_var or None
        ),
    )
    variables = {
        **defaults(text),
        "var.run_id": "hcl-1",
        "var.workers": 3,
        "var.kafka": "kafka.internal:9092",
        "var.checkpoints": "gs://bucket/runs",
        "var.gcs_emulator": gcs_emulator or "",
        "var.secrets_var": secrets_var,
    }
    assert hcl_job(text, variables) == job


def test_dry_run_hcl_parses_back_to_the_json_job() -> None:
    settings = LaunchSettings(
        preset="cartpole-dqn",
        run_id="hcl-2",
        workers=2,
        kafka_bootstrap="k:9092",
        checkpoints="gs://b",
        gcs_emulator="http://g:1",
    )
    job = build_job(
        build_run_spec(settings),
        NomadJobSettings(env=job_env("k:9092", "http://g:1"), secrets_var="nomad/jobs/x"),
    )
    assert hcl_job(job_hcl(job), {}) == job


def test_two_trainer_ranks_are_a_group_of_two_that_meet_at_rank_0s_announced_port() -> None:
    settings = LaunchSettings(
        preset="cartpole-ppo",
        run_id="hcl-3",
        workers=2,
        trainers=2,
        kafka_bootstrap="k:9092",
        checkpoints="gs://b",
        gcs_emulator="http://g:1",
    )
    job = build_job(build_run_spec(settings), NomadJobSettings(env=job_env("k:9092", "http://g:1")))
    assert check_job(job) == []  # Nomad's Go API Job type, no key it would ignore
    trainer = job["TaskGroups"][0]
    assert (trainer["Name"], trainer["Count"]) == ("trainer", 2)
    assert [t["Name"] for t in trainer["Tasks"]] == ["trainer"]
    assert trainer["Networks"] == [{"DynamicPorts": [{"Label": "rendezvous"}]}]
    args = trainer["Tasks"][0]["Config"]["args"]
    assert args[args.index("--rank") + 1] == "${NOMAD_ALLOC_INDEX}"
    assert args[args.index("--rendezvous") + 1] == "${NOMAD_ADDR_rendezvous}"
    assert "--announce-rendezvous" in args
    assert args[args.index("--set") + 1 :].count("trainer.count=2") == 1
    text = job_hcl(job)
    assert 'port "rendezvous" {' in text
    assert hcl_job(text, {}) == job
    docker = build_job(
        build_run_spec(settings),
        NomadJobSettings(env=job_env("k:9092", "http://g:1"), driver="docker", image="i:1"),
    )
    assert docker["TaskGroups"][0]["Tasks"][0]["Config"]["network_mode"] == "host"
    assert check_job(docker) == []
