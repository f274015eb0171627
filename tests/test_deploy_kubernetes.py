"""deploy/kubernetes: the Node Problem Detector plugin config has the shape NPD reads, the
manifests fit together, and the plugin keeps NPD's contract when run for real on env files.

NPD is read at tag v1.36.0 of kubernetes/node-problem-detector (the image the DaemonSet copies
its binary from, v0.8.19, has the same config types and exit-status handling):

- pkg/custompluginmonitor/types/config.go: ``CustomPluginConfig`` (``plugin``, ``pluginConfig``,
  ``source``, ``conditions``, ``rules``, ``metricsReporting``), ``pluginGlobalConfig``
  (``invoke_interval``, ``timeout``, ``max_output_length``, ``concurrency``,
  ``enable_message_change_based_condition_update``, ``skip_initial_status``); ``Validate``: the
  plugin is "custom", no rule timeout over the global one, every rule path exists, a permanent
  rule's condition has a default condition; durations go through Go's ``time.ParseDuration``.
- pkg/custompluginmonitor/types/types.go: ``CustomRule`` (``type``, ``condition``, ``reason``,
  ``path``, ``args``, ``timeout``); pkg/types/types.go: ``Condition`` (``type``, ``status``,
  ``transition``, ``reason``, ``message``) and the rule types "temporary" and "permanent".
- pkg/custompluginmonitor/plugin/plugin.go, ``Plugin.run``: stdout trimmed
  (``strings.TrimSpace``) and cut at ``max_output_length`` bytes; exit status 0 OK, 1 NonOK,
  anything else Unknown.

Go's JSON decoder ignores fields it does not know, so a misspelt key would be dropped without a
word by NPD: the schema below allows only the fields of those structs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from attn_doctor.report.npd import MAX_OUTPUT_LENGTH

REPO = Path(__file__).resolve().parents[1]
K8S = REPO / "deploy" / "kubernetes"
MONITOR = K8S / "attn-doctor-monitor.json"
PLUGIN = K8S / "attn-doctor-npd-plugin.sh"
FIXTURES = REPO / "tests" / "fixtures"
HEALTHY = FIXTURES / "healthy" / "h100-current.json"
OLD_DRIVER = FIXTURES / "deploy" / "h100-driver-550-torch-cu132.json"
DOCTOR = Path(sys.executable).parent / "attn-doctor"

GO_DURATION = r"^([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$"  # what time.ParseDuration takes (unsigned)

CUSTOM_PLUGIN_CONFIG_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "NPD CustomPluginConfig (config.go, types.go at v1.36.0)",
    "type": "object",
    "additionalProperties": False,
    "required": ["plugin", "source", "conditions", "rules"],
    "properties": {
        "plugin": {"const": "custom"},  # Validate: only "custom"
        "pluginConfig": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "invoke_interval": {"type": "string", "pattern": GO_DURATION},
                "timeout": {"type": "string", "pattern": GO_DURATION},
                "max_output_length": {"type": "integer", "minimum": 1},
                "concurrency": {"type": "integer", "minimum": 1},
                "enable_message_change_based_condition_update": {"type": "boolean"},
                "skip_initial_status": {"type": "boolean"},
            },
        },
        "source": {"type": "string", "minLength": 1},
        "metricsReporting": {"type": "boolean"},
        "conditions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["type", "reason", "message"],
                "properties": {
                    "type": {"type": "string", "minLength": 1},
                    "status": {"enum": ["True", "False", "Unknown"]},
                    "transition": {"type": "string"},
                    "reason": {"type": "string", "minLength": 1},
                    "message": {"type": "string"},
                },
            },
        },
        "rules": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["type", "reason", "path"],
                "properties": {
                    "type": {"enum": ["temporary", "permanent"]},
                    "condition": {"type": "string"},
                    "reason": {"type": "string", "minLength": 1},
                    "path": {"type": "string", "minLength": 1},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "timeout": {"type": "string", "pattern": GO_DURATION},
                },
                "if": {"properties": {"type": {"const": "permanent"}}},
                "then": {"required": ["condition"]},
            },
        },
    },
}


def monitor() -> dict:
    return json.loads(MONITOR.read_text())


def seconds(duration: str) -> float:
    """A Go duration of the pattern above, in seconds."""
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * units[u] for n, u in re.findall(r"([0-9.]+)(ns|us|µs|ms|s|m|h)", duration))


def test_the_plugin_config_has_npds_shape() -> None:
    config = monitor()
    jsonschema.validate(config, CUSTOM_PLUGIN_CONFIG_SCHEMA)

    # Validate()'s checks beyond the shape
    global_timeout = seconds(config["pluginConfig"]["timeout"])
    defaults = {condition["type"] for condition in config["conditions"]}
    for rule in config["rules"]:
        assert seconds(rule.get("timeout", "0s")) <= global_timeout, rule
        if rule["type"] == "permanent":
            assert rule["condition"] in defaults, rule
    assert {rule["type"] for rule in config["rules"]} == {"temporary", "permanent"}
    # the whole line `check --format npd` writes reaches the condition, uncut
    assert config["pluginConfig"]["max_output_length"] >= MAX_OUTPUT_LENGTH


@pytest.mark.parametrize(
    "typo",
    [
        {"pluginConfig": {"invoke_intervall": "10m"}},
        {"pluginConfig": {"timeout": "60"}},
        {"plugin": "filelog"},
        {"rules": [{"type": "permanent", "reason": "X", "path": "/x"}]},
    ],
)
def test_the_schema_refuses_what_npd_would_drop_or_refuse(typo: dict) -> None:
    config = monitor()
    for key, value in typo.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) else value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config, CUSTOM_PLUGIN_CONFIG_SCHEMA)


def test_every_rule_runs_the_plugin_where_the_image_puts_it() -> None:
    dockerfile = (K8S / "Dockerfile").read_text()
    copy = f"COPY deploy/kubernetes/{PLUGIN.name} "
    [installed] = [line.removeprefix(copy) for line in dockerfile.splitlines() if line.startswith(copy)]
    assert {rule["path"] for rule in monitor()["rules"]} == {installed}
    assert "/usr/local/bin/node-problem-detector" in dockerfile
    assert os.access(PLUGIN, os.X_OK), "git keeps the mode the image's COPY keeps"


def load_all(name: str) -> list[dict]:
    return list(yaml.safe_load_all((K8S / name).read_text()))


def test_the_daemonset_mounts_the_plugin_config_where_the_flag_points() -> None:
    [kustomization] = load_all("kustomization.yaml")
    assert kustomization["resources"] == ["daemonset.yaml"]
    [generator] = kustomization["configMapGenerator"]
    assert generator["files"] == [MONITOR.name]

    [daemonset] = [doc for doc in load_all("daemonset.yaml") if doc["kind"] == "DaemonSet"]
    pod = daemonset["spec"]["template"]["spec"]
    [container] = pod["containers"]
    [flag] = [arg for arg in container["command"] if arg.startswith("--config.custom-plugin-monitor=")]
    config_path = Path(flag.split("=", 1)[1])

    [mount] = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == config_path.parent]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == generator["name"]
    [item] = volume["configMap"]["items"]
    assert (item["key"], item["path"]) == (MONITOR.name, config_path.name)

    env = {e["name"]: e.get("value") for e in container["env"]}
    assert "NODE_NAME" in env and env["NVIDIA_VISIBLE_DEVICES"] == "all"
    [binding] = [doc for doc in load_all("daemonset.yaml") if doc["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == "system:node-problem-detector"
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]


def npd_reads(done: subprocess.CompletedProcess[bytes], max_output_length: int) -> tuple[str, str]:
    """What Plugin.run makes of a plugin's run: (status, message)."""
    message = done.stdout.decode("utf-8", "replace").strip()[:max_output_length]
    status = {0: "OK", 1: "NonOK"}.get(done.returncode, "Unknown")
    return status, message


def run_plugin(args: list[str], **env: str) -> subprocess.CompletedProcess[bytes]:
    assert DOCTOR.is_file(), f"the CLI under test is {DOCTOR}"
    full = {**os.environ, "ATTN_DOCTOR": str(DOCTOR), **env}
    return subprocess.run([str(PLUGIN), *args], env=full, capture_output=True, timeout=120)


def assert_keeps_the_contract(done: subprocess.CompletedProcess[bytes], max_output_length: int) -> str:
    out = done.stdout
    assert out.isascii(), out
    assert out.count(b"\n") == 1 and out.endswith(b"\n"), out  # one line
    assert len(out.strip()) <= max_output_length, out
    return out.decode().strip()


@pytest.mark.parametrize("rule", range(2), ids=["temporary", "permanent"])
def test_the_plugin_keeps_npds_contract_on_real_stacks(rule: int, tmp_path: Path) -> None:
    config = monitor()
    args = config["rules"][rule]["args"]
    width = config["pluginConfig"]["max_output_length"]
    broken = tmp_path / "node7.json"
    broken.write_text('{"schema": "attn-doctor/environment", "schema_version": 99}')

    clean = run_plugin(args, ATTN_DOCTOR_ENV_FILE=str(HEALTHY))
    affected = run_plugin(args, ATTN_DOCTOR_ENV_FILE=str(OLD_DRIVER))
    unreadable = run_plugin(args, ATTN_DOCTOR_ENV_FILE=str(broken))

    assert npd_reads(clean, width) == ("OK", assert_keeps_the_contract(clean, width))
    assert assert_keeps_the_contract(clean, width).startswith("attn-doctor: ok: 0 of ")
    assert npd_reads(affected, width) == ("NonOK", assert_keeps_the_contract(affected, width))
    assert assert_keeps_the_contract(affected, width).startswith(
        "attn-doctor: cuda-driver-too-old-for-torch (error)"
    )
    assert npd_reads(unreadable, width)[0] == "Unknown"
    assert assert_keeps_the_contract(unreadable, width).startswith("attn-doctor: unknown: ")


def test_the_plugin_says_unknown_in_one_line_without_attn_doctor(tmp_path: Path) -> None:
    done = run_plugin([], ATTN_DOCTOR=str(tmp_path / "opt" / "attn-doctor" / "bin" / "attn-doctor"))

    assert npd_reads(done, MAX_OUTPUT_LENGTH)[0] == "Unknown"
    assert assert_keeps_the_contract(done, MAX_OUTPUT_LENGTH).startswith(
        "attn-doctor: unknown: attn-doctor is not"
    )


def test_the_plugin_checks_the_images_python_stack_by_default(site, tmp_path: Path) -> None:
    """No target given: every site-packages folder of the image's python3 (here a fake python3
    whose one site-packages holds torch 2.6.0+cu124 and xformers 0.0.28.post3, built for 2.5.1)."""
    site.install("torch", "2.6.0+cu124", torch_cuda="12.4")
    site.install("xformers", "0.0.28.post3")
    python = tmp_path / "python3"
    python.write_text(f"#!/bin/sh\necho {site.path}\n")
    python.chmod(0o755)

    done = run_plugin([], ATTN_DOCTOR_STACK_PYTHON=str(python))

    assert npd_reads(done, MAX_OUTPUT_LENGTH)[0] == "NonOK", done.stdout + done.stderr
    assert assert_keeps_the_contract(done, MAX_OUTPUT_LENGTH).startswith(
        "attn-doctor: xformers-built-for-another-torch (error)"
    )


def test_the_preflight_init_container_checks_the_workloads_own_image() -> None:
    [job] = load_all("preflight-job.yaml")
    pod = job["spec"]["template"]["spec"]
    [preflight] = pod["initContainers"]
    [train] = pod["containers"]

    assert preflight["image"] == train["image"]  # the stack lives in the job's image
    assert preflight["resources"]["limits"] == train["resources"]["limits"]  # the same GPUs
    assert preflight["command"][:4] == ["attn-doctor", "check", "--format", "verdict"]
    assert pod["restartPolicy"] == "Never"
    assert preflight["terminationMessagePolicy"] == "FallbackToLogsOnError"


@pytest.mark.parametrize(
    ("env_file", "exit_code", "severity"),
    [(HEALTHY, 0, "pass"), (OLD_DRIVER, 1, "critical"), (None, 2, None)],
    ids=["healthy", "driver-too-old", "broken-input"],
)
def test_the_preflight_command_stops_the_pod_on_a_critical_verdict(
    env_file: Path | None, exit_code: int, severity: str | None, tmp_path: Path
) -> None:
    """The init container's own words, with the facts of a node given as an env file."""
    [job] = load_all("preflight-job.yaml")
    [preflight] = job["spec"]["template"]["spec"]["initContainers"]
    if env_file is None:
        env_file = tmp_path / "node7.json"
        env_file.write_text("{not json")
    command = [str(DOCTOR), *preflight["command"][1:], "--env-file", str(env_file)]

    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)

    assert done.returncode == exit_code, done.stdout + done.stderr
    if severity is None:  # the tool's failure: one line on stderr naming the file
        assert done.stderr.count("\n") == 1 and "node7.json" in done.stderr, done.stderr
        return
    verdict = json.loads(done.stdout)
    schema = json.loads((REPO / "attn_doctor" / "schemas" / "verdict.schema.json").read_text())
    jsonschema.validate(verdict, schema)
    assert (verdict["overall_severity"], verdict["exit_code"]) == (severity, exit_code)
